#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "store/ingest_steps.h"
#include "store/journal.h"
#include "store/record_io.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace df::store {

namespace {

namespace fs = std::filesystem;

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void remove_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    fail("cannot remove '{}': {}", path, std::strerror(errno));
}

void pwrite_all(int fd, const std::string& path, const uint8_t* data, uint64_t n, uint64_t offset) {
  uint64_t done = 0;
  while (done < n) {
    ssize_t w = ::pwrite(fd, data + done, static_cast<size_t>(std::min<uint64_t>(n - done, 1ull << 30)),
                         static_cast<off_t>(offset + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      fail("cannot write '{}' at offset {}: {}", path, offset + done,
           w < 0 ? std::strerror(errno) : "no progress");
    done += static_cast<uint64_t>(w);
  }
}

// The number of experts of one batch: output records plus the largest source slab per expert, within budget.
int batch_experts(const StorePlan& plan, uint64_t budget) {
  uint64_t max_slab = 0;
  for (const auto& layer : plan.sources)
    for (const auto& s : layer) max_slab = std::max(max_slab, s.slab_bytes);
  uint64_t per_expert = plan.layout.record_bytes + max_slab;
  return static_cast<int>(
      std::clamp<uint64_t>(budget / per_expert, 1, static_cast<uint64_t>(plan.layout.n_expert)));
}

}  // namespace

uint64_t resumable_records(const std::string& dir, const SourceInfo& source, const Layout& layout,
                           std::vector<uint64_t>& checksums, const IngestOptions& opt) {
  const std::string partial = (fs::path(dir) / kExpertsPartialFile).string();
  const std::string journal_path = (fs::path(dir) / kJournalFile).string();
  checksums.clear();
  auto journal = read_journal(dir);
  auto restart = [&](const std::string& why) -> uint64_t {
    if (!why.empty() && opt.on_message)
      opt.on_message(fmt::format("restarting the ingest of {}: {}", dir, why));
    remove_file(partial);
    remove_file(journal_path);
    fsync_parent_dir(journal_path);
    return 0;
  };
  std::error_code ec;
  bool have_partial = fs::exists(partial, ec);
  if (!journal) return restart(have_partial ? "the interrupted ingest left no readable journal" : "");
  if (journal->source.sha256 != source.sha256 || journal->source.size != source.size)
    return restart(fmt::format("the interrupted ingest was of another source ({})", journal->source.name));
  if (journal->layout != layout_to_json(layout))
    return restart("the interrupted ingest planned another layout (an older diskformer?)");
  if (!have_partial) return restart("the journal has no experts.bin.partial beside it");

  Fd f;
  f.fd = ::open(partial.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) return restart(fmt::format("cannot open experts.bin.partial: {}", std::strerror(errno)));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return restart("cannot stat experts.bin.partial");
  uint64_t on_disk = static_cast<uint64_t>(st.st_size) / layout.record_bytes;
  uint64_t claimed = std::min({journal->records_done, on_disk, layout.n_records()});
  ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_SEQUENTIAL);

  // Re-read what the journal vouches for: the disk may have lost or damaged it since.
  std::vector<uint8_t> buf(layout.record_bytes);
  uint64_t good = 0;
  for (; good < claimed; ++good) {
    int layer = static_cast<int>(good / static_cast<uint64_t>(layout.n_expert));
    int expert = static_cast<int>(good % static_cast<uint64_t>(layout.n_expert));
    try {
      read_record(f.fd, partial, layout, layer, expert, buf.data());
    } catch (const Error&) {
      break;
    }
    if (record_xxh3(buf.data(), layout.record_bytes) != journal->checksums[good]) break;
    checksums.push_back(journal->checksums[good]);
    if (opt.progress)
      opt.progress("checking partial", (good + 1) * layout.record_bytes, claimed * layout.record_bytes);
  }
  if (opt.on_message)
    opt.on_message(fmt::format("resuming the interrupted ingest of {}: {} of {} records already written{}",
                               dir, good, layout.n_records(),
                               good < journal->records_done
                                   ? fmt::format(" ({} listed records were lost or damaged "
                                                 "and are written again)",
                                                 journal->records_done - good)
                                   : ""));
  return good;
}

void write_experts(const gguf::File& src, const StorePlan& plan, const std::string& dir,
                   const SourceInfo& source, uint64_t first_record, std::vector<uint64_t>& checksums,
                   const IngestOptions& opt) {
  const Layout& L = plan.layout;
  const std::string partial = (fs::path(dir) / kExpertsPartialFile).string();
  Fd out;
  out.fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (out.fd < 0) fail("cannot create '{}': {}", partial, std::strerror(errno));
  ::posix_fadvise(src.fd(), 0, 0, POSIX_FADV_SEQUENTIAL);

  const int per_batch = batch_experts(plan, opt.memory_budget);
  uint64_t max_slab = 0;
  for (const auto& layer : plan.sources)
    for (const auto& s : layer) max_slab = std::max(max_slab, s.slab_bytes);
  std::vector<uint8_t> records(static_cast<size_t>(per_batch) * L.record_bytes);
  std::vector<uint8_t> stage(static_cast<size_t>(per_batch) * max_slab);
  uint64_t max_group = 0;
  for (const auto& layer : plan.sources)
    for (const auto& s : layer) max_group = std::max<uint64_t>(max_group, s.row_bytes * quant::kQ4_0x16Rows);
  std::vector<uint8_t> group(max_group);

  Journal journal;
  journal.source = source;
  journal.layout = layout_to_json(L);
  uint64_t unsynced = 0, synced_from = first_record * L.record_bytes;
  auto checkpoint = [&](uint64_t records_done) {
    if (::fdatasync(out.fd) != 0) fail("fdatasync of '{}' failed: {}", partial, std::strerror(errno));
    // The pages are on disk now; dropping them keeps a huge ingest from pushing everything else out of
    // memory.
    uint64_t end = records_done * L.record_bytes;
    ::posix_fadvise(out.fd, static_cast<off_t>(synced_from), static_cast<off_t>(end - synced_from),
                    POSIX_FADV_DONTNEED);
    synced_from = end;
    journal.records_done = records_done;
    journal.checksums.assign(checksums.begin(), checksums.end());
    write_journal(dir, journal);
    unsynced = 0;
    if (opt.test_hook) opt.test_hook("checkpoint", records_done);
  };

  const uint64_t E = static_cast<uint64_t>(L.n_expert);
  uint64_t record = first_record;
  while (record < L.n_records()) {
    const int layer = static_cast<int>(record / E);
    const int e0 = static_cast<int>(record % E);
    const int e1 = std::min(L.n_expert, e0 + per_batch);
    const size_t n = static_cast<size_t>(e1 - e0);
    std::fill(records.begin(), records.begin() + static_cast<ptrdiff_t>(n * L.record_bytes), 0);
    for (const SourceSlabs& s : plan.sources[static_cast<size_t>(layer)]) {
      // One sequential read of this tensor's slabs for experts e0..e1-1.
      src.read_range(s.tensor->file_offset + static_cast<uint64_t>(e0) * s.slab_bytes, n * s.slab_bytes,
                     stage.data());
      for (size_t i = 0; i < n; ++i)
        for (const ExpertPart* p : s.parts) {
          uint8_t* dst = records.data() + i * L.record_bytes + p->offset;
          std::memcpy(dst,
                      stage.data() + i * s.slab_bytes + static_cast<uint64_t>(p->first_row) * s.row_bytes,
                      p->bytes);
          if (p->packing == quant::RowPacking::kQ4_0x16)
            quant::pack_q4_0x16_in_place(dst, p->n_out, p->n_in, group.data());
        }
    }
    for (size_t i = 0; i < n; ++i)
      checksums.push_back(record_xxh3(records.data() + i * L.record_bytes, L.record_bytes));
    pwrite_all(out.fd, partial, records.data(), n * L.record_bytes, L.record_offset(layer, e0));
    record += n;
    unsynced += n * L.record_bytes;
    if (opt.progress) opt.progress("writing experts", record * L.record_bytes, L.experts_bytes());
    if (record == L.n_records() || unsynced >= opt.checkpoint_bytes) checkpoint(record);
  }
  if (first_record == L.n_records()) checkpoint(record);

  struct stat st {};
  if (::fstat(out.fd, &st) != 0) fail("cannot stat '{}': {}", partial, std::strerror(errno));
  if (static_cast<uint64_t>(st.st_size) != L.experts_bytes())
    fail("'{}' is {} bytes after writing every record, expected {}", partial, st.st_size, L.experts_bytes());
  if (::fsync(out.fd) != 0) fail("fsync of '{}' failed: {}", partial, std::strerror(errno));
}

}  // namespace df::store

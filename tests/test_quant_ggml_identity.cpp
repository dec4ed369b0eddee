// Bit-identity with ggml: tests/data/quant/ggml_reference.bin holds what the prebuilt ggml of
// node-llama-cpp 3.21.1 (the llama.cpp build of the golden fixtures) produced, through
// tools/quant_fixtures/gen_fixtures.c, for fixed random vectors and for rows of the golden models:
// quantize_row_*_ref bytes, dequantize_row_* floats, its scalar ("generic") vec_dot results and its f16/bf16
// conversions. Everything here must match exactly.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "quant/quant.h"

namespace {

using df::GgmlType;
namespace q = df::quant;

struct Vector {
  std::string name;
  std::vector<float> values;
};
struct Bytes {  // QUANT: ggml's quantization of a vector; DEQUANT: bytes ggml dequantizes to the vector
  GgmlType type;
  uint32_t vector;
  std::vector<uint8_t> bytes;
};
struct Dot {
  GgmlType weight;
  uint32_t weight_vector, act_vector, n;
  float result;
};
struct Fixture {
  std::vector<Vector> vectors;
  std::vector<Bytes> quants, dequants;
  std::vector<Dot> dots;
  std::vector<float> fp_inputs;
  std::vector<uint16_t> fp16, bf16;
};

class Reader {
 public:
  explicit Reader(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    data_.assign(std::istreambuf_iterator<char>(in), {});
    if (data_.empty()) throw std::runtime_error("missing or empty fixture " + path.string());
  }
  uint32_t u32() {
    uint32_t v;
    read(&v, sizeof v);
    return v;
  }
  float f32() {
    float v;
    read(&v, sizeof v);
    return v;
  }
  template <typename T>
  std::vector<T> array(size_t n) {
    std::vector<T> v(n);
    read(v.data(), n * sizeof(T));
    return v;
  }
  void read(void* dst, size_t n) {
    if (n > data_.size() - pos_) throw std::runtime_error("fixture truncated");
    std::memcpy(dst, data_.data() + pos_, n);
    pos_ += n;
  }
  bool at_end() const { return pos_ == data_.size(); }

 private:
  std::vector<char> data_;
  size_t pos_ = 0;
};

Fixture load_fixture() {
  Fixture fx;
  Reader r(std::filesystem::path(__FILE__).parent_path() / "data/quant/ggml_reference.bin");
  const auto magic = r.array<char>(8);
  if (std::string(magic.begin(), magic.end()) != "DFQFIX01") throw std::runtime_error("bad fixture magic");
  const uint32_t records = r.u32();
  for (uint32_t i = 0; i < records; ++i) {
    const uint32_t kind = r.u32();
    if (kind == 1) {
      Vector v;
      const auto name = r.array<char>(r.u32());
      v.name.assign(name.begin(), name.end());
      v.values = r.array<float>(r.u32());
      fx.vectors.push_back(std::move(v));
    } else if (kind == 2 || kind == 3) {
      Bytes b{static_cast<GgmlType>(r.u32()), r.u32(), {}};
      b.bytes = r.array<uint8_t>(r.u32());
      (kind == 2 ? fx.quants : fx.dequants).push_back(std::move(b));
    } else if (kind == 4) {
      Dot d{static_cast<GgmlType>(r.u32()), r.u32(), r.u32(), r.u32(), 0.0f};
      d.result = r.f32();
      fx.dots.push_back(d);
    } else if (kind == 5) {
      const uint32_t n = r.u32();
      fx.fp_inputs = r.array<float>(n);
      fx.fp16 = r.array<uint16_t>(n);
      fx.bf16 = r.array<uint16_t>(n);
    } else {
      throw std::runtime_error("unknown fixture record kind " + std::to_string(kind));
    }
  }
  if (!r.at_end()) throw std::runtime_error("trailing bytes in fixture");
  return fx;
}

const Fixture& fixture() {
  static const Fixture fx = load_fixture();
  return fx;
}

const Bytes& quant_of(GgmlType t, uint32_t vector) {
  for (const auto& b : fixture().quants)
    if (b.type == t && b.vector == vector) return b;
  throw std::runtime_error("fixture lacks a quantization of vector " + std::to_string(vector));
}

std::string label(const Bytes& b) {
  return std::string(df::ggml_type_name(b.type)) + " of '" + fixture().vectors.at(b.vector).name + "'";
}

// Index of the first differing byte, or -1.
long first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (a[i] != b[i]) return static_cast<long>(i);
  return a.size() == b.size() ? -1 : static_cast<long>(std::min(a.size(), b.size()));
}

TEST(QuantGgmlIdentity, FixtureCoversEveryTypeAndTheGoldenModels) {
  std::set<GgmlType> quantized, dequantized, dotted;
  for (const auto& b : fixture().quants) quantized.insert(b.type);
  for (const auto& b : fixture().dequants) dequantized.insert(b.type);
  for (const auto& d : fixture().dots) dotted.insert(d.weight);
  for (GgmlType t :
       {GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q8_1,
        GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_K, GgmlType::MXFP4})
    EXPECT_TRUE(quantized.count(t)) << df::ggml_type_name(t);
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q6_K, GgmlType::MXFP4, GgmlType::Q8_0, GgmlType::F16})
    EXPECT_TRUE(dequantized.count(t)) << df::ggml_type_name(t);
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                     GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::MXFP4})
    EXPECT_TRUE(dotted.count(t)) << df::ggml_type_name(t);
  int golden = 0;  // vectors dequantized from a golden model are named "<model>:<tensor>@<first value>"
  for (const auto& v : fixture().vectors) golden += v.name.find(':') != std::string::npos;
  EXPECT_GE(golden, 5);
}

TEST(QuantGgmlIdentity, QuantizeRowIsByteIdenticalToGgmlRef) {
  int checked = 0;
  for (const auto& b : fixture().quants) {
    const auto& x = fixture().vectors.at(b.vector).values;
    std::vector<uint8_t> ours(b.bytes.size());
    q::quantize_row(b.type, x.data(), ours.data(), static_cast<int64_t>(x.size()));
    const long diff = first_difference(ours, b.bytes);
    EXPECT_EQ(diff, -1) << label(b) << ": first different byte " << diff << " (block "
                        << diff / static_cast<long>(df::ggml_traits(b.type).type_size) << ")";
    ++checked;
  }
  EXPECT_GT(checked, 150);
}

TEST(QuantGgmlIdentity, ActivationQuantizationIsByteIdenticalToGgmlRef) {
  int checked = 0;
  for (const auto& b : fixture().quants) {
    if (b.type != GgmlType::Q8_0 && b.type != GgmlType::Q8_1 && b.type != GgmlType::Q8_K &&
        b.type != GgmlType::F16 && b.type != GgmlType::BF16)
      continue;
    const auto& x = fixture().vectors.at(b.vector).values;
    std::vector<uint8_t> ours(b.bytes.size());
    q::quantize_activation(b.type, x.data(), ours.data(), static_cast<int64_t>(x.size()));
    EXPECT_EQ(first_difference(ours, b.bytes), -1) << label(b);
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

TEST(QuantGgmlIdentity, DequantizeRowIsBitIdenticalToGgml) {
  for (const auto& b : fixture().dequants) {
    const auto& expected = fixture().vectors.at(b.vector).values;
    std::vector<float> ours(expected.size());
    q::dequantize_row(b.type, b.bytes.data(), ours.data(), static_cast<int64_t>(ours.size()));
    size_t mismatches = 0;
    for (size_t i = 0; i < ours.size(); ++i)
      mismatches += std::memcmp(&ours[i], &expected[i], sizeof(float)) != 0;
    EXPECT_EQ(mismatches, 0u) << label(b);
  }
}

TEST(QuantGgmlIdentity, VecDotIsBitIdenticalToGgmlScalarPath) {
  for (const auto& d : fixture().dots) {
    float ours;
    const std::string what = std::string(df::ggml_type_name(d.weight)) + " '" +
                             fixture().vectors.at(d.weight_vector).name + "' . '" +
                             fixture().vectors.at(d.act_vector).name + "' n=" + std::to_string(d.n);
    if (d.weight == GgmlType::F32) {
      ours = q::vec_dot(d.weight, fixture().vectors.at(d.weight_vector).values.data(),
                        fixture().vectors.at(d.act_vector).values.data(), d.n);
    } else {
      const auto& w = quant_of(d.weight, d.weight_vector);
      const auto& a = quant_of(q::vec_dot_type(d.weight), d.act_vector);
      ours = q::vec_dot(d.weight, w.bytes.data(), a.bytes.data(), d.n);
    }
    EXPECT_EQ(std::memcmp(&ours, &d.result, sizeof ours), 0)
        << what << ": ours " << ours << " ggml " << d.result;
  }
}

TEST(QuantGgmlIdentity, HalfAndBfloatConversionsMatchGgml) {
  const auto& fx = fixture();
  ASSERT_FALSE(fx.fp_inputs.empty());
  for (size_t i = 0; i < fx.fp_inputs.size(); ++i) {
    EXPECT_EQ(q::fp32_to_fp16(fx.fp_inputs[i]), fx.fp16[i]) << "input " << fx.fp_inputs[i];
    EXPECT_EQ(q::fp32_to_bf16(fx.fp_inputs[i]), fx.bf16[i]) << "input " << fx.fp_inputs[i];
  }
}

}  // namespace

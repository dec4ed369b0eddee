#pragma once
// Memory a backend owns, named so that model code cannot touch it (docs/ARCHITECTURE.md "Buffers"). Every
// array a forward pass reads or writes — activations, the KV cache, recurrent state, scratch, routing ids and
// weights — lives in a DeviceBuffer that the backend allocated (host memory for the CPU backend, device
// memory for a GPU one) and is passed to ops as a Buf: a typed view with a size that can be narrowed but not
// read or written through. Data reaches the host only through the backend's explicit upload/download calls.
// Only backend implementations reach the address, through BufferAccess (backend/buffer_access.h).
#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>

#include "util/error.h"

namespace df::backend {

class Backend;
struct BufferAccess;

template <class T>
class Buf {
 public:
  static constexpr size_t npos = static_cast<size_t>(-1);

  Buf() = default;
  // A view of mutable elements is also a view of const ones.
  template <class U>
  requires(std::is_same_v<const U, T> && !std::is_same_v<U, T>) Buf(Buf<U> other)
      : p_(other.p_), n_(other.n_) {}  // NOLINT(google-explicit-constructor)

  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  // False for the default (absent) view: an optional operand not given.
  explicit operator bool() const { return p_ != nullptr; }

  // Elements [offset, offset + count) of this view (count npos: to its end). df::Error when out of range.
  Buf sub(size_t offset, size_t count = npos) const {
    if (offset > n_ || (count != npos && count > n_ - offset))
      fail("buffer view [{}, +{}) is out of range of a view of {} elements", offset,
           count == npos ? n_ - offset : count, n_);
    return Buf(p_ + offset, count == npos ? n_ - offset : count);
  }
  // The first count elements.
  Buf first(size_t count) const { return sub(0, count); }
  // Whether both views are the same elements (an identity test that does not reveal the address).
  bool same_view(const Buf& other) const { return p_ == other.p_ && n_ == other.n_; }
  // The same memory as bytes (what the untyped transfer calls take).
  using Byte = std::conditional_t<std::is_const_v<T>, const uint8_t, uint8_t>;
  Buf<Byte> bytes() const { return Buf<Byte>(reinterpret_cast<Byte*>(p_), n_ * sizeof(T)); }

 private:
  Buf(T* p, size_t n) : p_(p), n_(n) {}
  template <class>
  friend class Buf;
  friend class DeviceBuffer;
  friend struct BufferAccess;
  T* p_ = nullptr;
  size_t n_ = 0;
};

// An allocation made by Backend::alloc, freed by the backend that made it: that backend must outlive it.
// Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : backend_(other.backend_), data_(other.data_), bytes_(other.bytes_) {
    other.backend_ = nullptr;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      this->~DeviceBuffer();
      new (this) DeviceBuffer(static_cast<DeviceBuffer&&>(other));
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  size_t bytes() const { return bytes_; }
  bool empty() const { return bytes_ == 0; }
  // The whole buffer as elements of T (bytes / sizeof(T) of them).
  template <class T>
  Buf<T> as() const {
    return Buf<T>(static_cast<T*>(data_), bytes_ / sizeof(T));
  }

 private:
  friend class Backend;
  friend struct BufferAccess;
  DeviceBuffer(Backend* backend, void* data, size_t bytes) : backend_(backend), data_(data), bytes_(bytes) {}
  Backend* backend_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace df::backend

#pragma once
// The addresses behind Buf and DeviceBuffer, for backend implementations only (backend/cpu, backend/cuda,
// test backends): model and engine code never include this header (grep finds it nowhere in src/models or
// src/engine), so the type system keeps them from reading or writing backend memory.
#include <cstddef>

#include "backend/buffer.h"

namespace df::backend {

struct BufferAccess {
  template <class T>
  static T* raw(Buf<T> b) {
    return b.p_;
  }
  template <class T>
  static Buf<T> wrap(T* p, size_t n) {
    return Buf<T>(p, n);
  }
  // A DeviceBuffer that `backend` frees (Backend::free_memory) when it goes.
  static DeviceBuffer adopt(Backend* backend, void* data, size_t bytes) {
    return DeviceBuffer(backend, data, bytes);
  }
  static void* data(const DeviceBuffer& b) { return b.data_; }
};

}  // namespace df::backend

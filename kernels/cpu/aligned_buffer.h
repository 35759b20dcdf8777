#pragma once
// A zero-initialized, 64-byte aligned array of trivially copyable T (one cache line / one
// AVX-512 register), for weights and activations the SIMD kernels stream through.
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

namespace specula {

template <class T>
class AlignedBuffer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) { resize(n); }

  // Discards the contents; the new elements are zero.
  void resize(size_t n) {
    size_ = n;
    if (n == 0) {
      data_.reset();
      return;
    }
    size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, bytes);
    data_.reset(static_cast<T*>(p));
  }
  // Grows (discarding contents) only when n exceeds the current size.
  void ensure(size_t n) {
    if (n > size_) resize(n);
  }

  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_.get()[i]; }
  const T& operator[](size_t i) const { return data_.get()[i]; }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T[], Free> data_;
  size_t size_ = 0;
};

}  // namespace specula

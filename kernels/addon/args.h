// Argument checking for the addon's functions: every typed array is checked for its exact element type and
// for a length that covers what the kernel will touch, so nothing reaches the C ABI that could read or write
// out of bounds. Failures throw a JS TypeError/RangeError naming the function and the argument.
#pragma once
#include <napi.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "../kernels.h"

template <typename T>
struct TypedKind;
template <> struct TypedKind<float> { static constexpr napi_typedarray_type value = napi_float32_array; static constexpr const char* name = "Float32Array"; };
template <> struct TypedKind<int32_t> { static constexpr napi_typedarray_type value = napi_int32_array; static constexpr const char* name = "Int32Array"; };
template <> struct TypedKind<uint8_t> { static constexpr napi_typedarray_type value = napi_uint8_array; static constexpr const char* name = "Uint8Array"; };
template <> struct TypedKind<uint64_t> { static constexpr napi_typedarray_type value = napi_biguint64_array; static constexpr const char* name = "BigUint64Array"; };
template <> struct TypedKind<double> { static constexpr napi_typedarray_type value = napi_float64_array; static constexpr const char* name = "Float64Array"; };

template <typename T>
struct Arr {
  T* data = nullptr;
  size_t len = 0;
  explicit operator bool() const { return data != nullptr; }
};

class Args {
 public:
  Args(const Napi::CallbackInfo& info, const char* fn) : info_(info), fn_(fn) {}
  Napi::Env env() const { return info_.Env(); }
  size_t size() const { return info_.Length(); }
  Napi::Value operator[](size_t i) const { return info_[i]; }

  [[noreturn]] void type_error(const std::string& msg) const { throw Napi::TypeError::New(info_.Env(), std::string(fn_) + ": " + msg); }
  [[noreturn]] void range_error(const std::string& msg) const { throw Napi::RangeError::New(info_.Env(), std::string(fn_) + ": " + msg); }

  double num(size_t i, const char* name) const {
    if (i >= info_.Length() || !info_[i].IsNumber()) type_error(std::string(name) + " must be a number");
    return info_[i].As<Napi::Number>().DoubleValue();
  }
  int32_t i32(size_t i, const char* name, int64_t lo = std::numeric_limits<int32_t>::min(), int64_t hi = std::numeric_limits<int32_t>::max()) const {
    return (int32_t)int_in(num(i, name), name, lo, hi);
  }
  int64_t int_in(double v, const char* name, int64_t lo, int64_t hi) const {
    if (!std::isfinite(v) || std::floor(v) != v) type_error(std::string(name) + " must be an integer (got " + std::to_string(v) + ")");
    if (v < (double)lo || v > (double)hi)
      range_error(std::string(name) + " = " + std::to_string((long long)v) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return (int64_t)v;
  }
  bool flag(size_t i, const char* name) const {
    if (i >= info_.Length() || !info_[i].IsBoolean()) type_error(std::string(name) + " must be a boolean");
    return info_[i].As<Napi::Boolean>().Value();
  }
  Napi::Object obj(size_t i, const char* name) const {
    if (i >= info_.Length() || !info_[i].IsObject()) type_error(std::string(name) + " must be an object");
    return info_[i].As<Napi::Object>();
  }
  bool is_null(size_t i) const { return i >= info_.Length() || info_[i].IsNull() || info_[i].IsUndefined(); }

  // A typed array of element type T with at least min_len elements (or null when nullable).
  template <typename T>
  Arr<T> arr(size_t i, const char* name, size_t min_len, bool nullable = false) const {
    if (nullable && is_null(i)) return {};
    if (i >= info_.Length() || !info_[i].IsTypedArray()) type_error(std::string(name) + " must be a " + TypedKind<T>::name);
    auto ta = info_[i].As<Napi::TypedArray>();
    if (ta.TypedArrayType() != TypedKind<T>::value) type_error(std::string(name) + " must be a " + TypedKind<T>::name);
    const size_t len = ta.ElementLength();
    if (len < min_len)
      range_error(std::string(name) + " has " + std::to_string(len) + " elements, needs " + std::to_string(min_len));
    Arr<T> a;
    a.len = len;
    a.data = reinterpret_cast<T*>(static_cast<uint8_t*>(ta.ArrayBuffer().Data()) + ta.ByteOffset());
    // An empty array may have no backing store: give the C side a valid (never dereferenced) pointer.
    static T dummy{};
    if (!a.data) a.data = &dummy;
    return a;
  }

 private:
  const Napi::CallbackInfo& info_;
  const char* fn_;
};

// Field readers for option objects passed from TS.
inline double field_num(const Args& a, Napi::Object o, const char* key) {
  Napi::Value v = o.Get(key);
  if (!v.IsNumber()) a.type_error(std::string(key) + " must be a number");
  return v.As<Napi::Number>().DoubleValue();
}
inline std::string field_str(const Args& a, Napi::Object o, const char* key) {
  Napi::Value v = o.Get(key);
  if (!v.IsString()) a.type_error(std::string(key) + " must be a string");
  return v.As<Napi::String>().Utf8Value();
}
inline bool field_bool(const Args& a, Napi::Object o, const char* key) {
  Napi::Value v = o.Get(key);
  if (!v.IsBoolean()) a.type_error(std::string(key) + " must be a boolean");
  return v.As<Napi::Boolean>().Value();
}

// Throws a JS Error carrying the backend's message when a call failed.
inline void check_status(Napi::Env env, const char* fn, int32_t status, const rs_error& e) {
  if (status == 0) return;
  Napi::Error err = Napi::Error::New(env, e.message[0] ? std::string(e.message) : std::string(fn) + ": error code " + std::to_string(status));
  err.Set("rsStatus", Napi::Number::New(env, status));
  throw err;
}

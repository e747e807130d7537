// SPDX-License-Identifier: Apache-2.0
//
// The policy families of qsdp.torch by name and bit width, for both extensions: make_family picks
// P<bits> (or hadamard<P<bits>>) at run time and wraps it in Impl<Q> (the host extension's
// policy_impl, the CUDA extension's device_policy_impl); make_named dispatches a family name to the
// per-family factories, each instantiated in its own translation unit so that two cores build them
// side by side.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include <qsdp/config.hpp>
#include <qsdp/quantizers.hpp>

namespace qsdp::python {

/// Impl<P<bits>> (or Impl<hadamard<P<bits>>> when rotated) for bits in [MinBits, 8]; `family`
/// names P in the message for another width.
template <template <class> class Impl, template <int> class P, int MinBits>
std::unique_ptr<typename Impl<P<8>>::interface> make_family(const char* family, int bits,
                                                            std::size_t bucket_size,
                                                            std::uint64_t seed, bool rotated) {
  std::unique_ptr<typename Impl<P<8>>::interface> made;
  [&]<int... B>(std::integer_sequence<int, B...>) {
    (
        [&] {
          if (bits != B + MinBits) return;
          P<B + MinBits> inner{};
          inner.bucket_size = bucket_size;
          if constexpr (requires { inner.seed; }) inner.seed = seed;
          if (!rotated) {
            made = std::make_unique<Impl<P<B + MinBits>>>(inner);
          } else {
            qsdp::hadamard<P<B + MinBits>> q{inner};
            q.seed = seed;
            made = std::make_unique<Impl<qsdp::hadamard<P<B + MinBits>>>>(q);
          }
        }(),
        ...);
  }
  (std::make_integer_sequence<int, 9 - MinBits>{});
  if (!made)
    throw qsdp::error(std::string("qsdp.torch.") + family + ": bits is " + std::to_string(bits) +
                      "; expected " + std::to_string(MinBits) + " to 8");
  return made;
}

/// The per-family factories of one extension.
template <class Interface>
struct family_factories {
  using maker = std::unique_ptr<Interface> (*)(int bits, std::size_t bucket_size,
                                               std::uint64_t seed, bool rotated);
  maker stochastic, uniform, symmetric, random_shift;
  std::unique_ptr<Interface> (*identity)();
};

/// A built-in policy: family "stochastic", "uniform", "symmetric" or "random_shift" (bits 1..8,
/// random_shift 2..8), optionally rotated (qsdp::hadamard<...>); "identity" takes no bits. seed is
/// ignored by the policies that draw nothing. Throws qsdp::error naming a bad argument.
template <class Interface>
std::unique_ptr<Interface> make_named(const family_factories<Interface>& f,
                                      const std::string& family, int bits, std::size_t bucket_size,
                                      std::uint64_t seed, bool rotated) {
  if (family == "stochastic") return f.stochastic(bits, bucket_size, seed, rotated);
  if (family == "uniform") return f.uniform(bits, bucket_size, seed, rotated);
  if (family == "symmetric") return f.symmetric(bits, bucket_size, seed, rotated);
  if (family == "random_shift") return f.random_shift(bits, bucket_size, seed, rotated);
  if (family == "identity" && !rotated) return f.identity();
  throw qsdp::error(
      "qsdp.torch: policy family \"" + family + "\"" + (rotated ? " under hadamard" : "") +
      "; expected stochastic, uniform, symmetric, random_shift" + (rotated ? "" : " or identity"));
}

}  // namespace qsdp::python

// expect: qsdp::stochastic<B>: B \(bits per value\) must be 1\.\.8
#include <qsdp/quantizers.hpp>

int main() {
  qsdp::stochastic<0> q{};
  return static_cast<int>(q.bucket_size);
}

// expect: qsdp::random_shift<B>: B \(bits per value\) must be 2\.\.8
// One bit leaves no room for the shifted grid (it needs a point below min and one above max).
#include <qsdp/quantizers.hpp>

int main() {
  qsdp::random_shift<1> q{};
  return static_cast<int>(q.bucket_size);
}

// expect: element type must be float, double, __half or __nv_bfloat16
#include <qsdp/codec.hpp>

int main() {
  int x[4] = {};
  std::byte packet[256];
  qsdp::encode(qsdp::uniform<8>{}, x, 4, packet);
}

// SPDX-License-Identifier: Apache-2.0
// main() of the two demos (codec_demo.cpp, collectives_demo.cpp): parse the options, run the demo
// for the element type --dtype names (float, or bf16 where the CUDA toolkit's headers are), and
// turn a qsdp::error, or running out of memory, into a message and exit status 1.
#pragma once

#include <cstdio>
#include <new>

#include <qsdp/config.hpp>

template <class Parse, class Run>
int run_demo(const char* program, int argc, char** argv, Parse&& parse, Run&& run) {
  try {
    const auto options = parse(argc, argv);
    if (options.dtype == "float") run(float{}, options);
#if QSDP_HAS_CUDA_HALF
    else
      run(__nv_bfloat16{}, options);
#endif
    return 0;
  } catch (const qsdp::error& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: out of memory (a smaller --size needs less)\n", program);
    return 1;
  }
}

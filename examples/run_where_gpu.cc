// run_where_gpu PROGRAM [ARGS...]: runs PROGRAM where a CUDA device can be used; elsewhere says why
// and exits 77, which the test suite counts as skipped (the README's GPU example).
#include <unistd.h>

#include <cstdio>
#include <string>

#include <attnkit/attnkit.h>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: run_where_gpu PROGRAM [ARGS...]\n");
    return 2;
  }
  std::string why;
  if (!attnkit::cuda_available(&why)) {
    std::printf("skipped (needs a GPU): %s\n", why.c_str());
    return 77;
  }
  std::fflush(stdout);
  execv(argv[1], argv + 1);
  std::perror(argv[1]);
  return 1;
}

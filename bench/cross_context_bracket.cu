// Can a trusted process time a kernel that another process (the candidate's runner) launches?
// An experiment for issue 13: today each side's sample time is measured with CUDA events inside
// the runner, the process that runs the candidate's code, so the candidate can rewrite it in its
// own memory; only the trusted wall time bounds it. Here the trusted process brackets the
// runner's work on the GPU itself:
//
//   trusted stream:  [write inputs]  E1  write go=i   wait done>=i  E2  [copy outputs]
//   runner stream:                       wait go>=i   E_r1 kernel E_r2  write done=i
//
// go and done live in the trusted process's device memory, opened by the runner through CUDA IPC;
// the waits and writes are stream memory operations (cuStreamWaitValue32/WriteValue32). The two
// processes have separate contexts, which the GPU time-slices, so E2 - E1 includes switching
// between them. Printed per kernel size: the runner's own event time (what it reports today), the
// bracket, their difference and ratio, medians over the samples, with an empty kernel to show the
// bracket's fixed cost. An L2 flush precedes every sample in the runner's stream (outside both).
//
//   nvcc -O2 -std=c++17 -arch=native -o /tmp/bracket bench/cross_context_bracket.cu -lcuda
//   /tmp/bracket [samples=200] [device|host]   (where go and done live)
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#define CHECK_RT(call)                                                                             \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));   \
      std::exit(2);                                                                                \
    }                                                                                              \
  } while (0)
#define CHECK_DRV(call)                                                                            \
  do {                                                                                             \
    CUresult r_ = (call);                                                                          \
    if (r_ != CUDA_SUCCESS) {                                                                      \
      const char* s_ = nullptr;                                                                    \
      cuGetErrorString(r_, &s_);                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, s_ ? s_ : "?");            \
      std::exit(2);                                                                                \
    }                                                                                              \
  } while (0)

__global__ void vector_add(const float* x, const float* y, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = x[i] + y[i];
}
__global__ void empty_kernel() {}

namespace {

// Messages over the pipes: fixed-size structs, both processes are this binary.
struct Setup {
  cudaIpcMemHandle_t flags;
  int host; // 1: the flags are in the shared host page, registered by each process
};
struct Order {
  int n;       // elements; 0: the empty kernel; -1: stop
  unsigned id; // the sample's go/done value
};
struct Reply {
  float runner_ms;
};

void read_all(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  while (n) {
    ssize_t r = read(fd, c, n);
    if (r <= 0)
      std::exit(3);
    c += r;
    n -= static_cast<size_t>(r);
  }
}
void write_all(int fd, const void* p, size_t n) {
  auto* c = static_cast<const char*>(p);
  while (n) {
    ssize_t r = write(fd, c, n);
    if (r <= 0)
      std::exit(3);
    c += r;
    n -= static_cast<size_t>(r);
  }
}

// Device addresses of go (and done, 4 bytes on) in the shared host page.
CUdeviceptr map_host_page(void* page) {
  CHECK_RT(cudaHostRegister(page, 4096, cudaHostRegisterMapped | cudaHostRegisterPortable));
  void* device = nullptr;
  CHECK_RT(cudaHostGetDevicePointer(&device, page, 0));
  return reinterpret_cast<CUdeviceptr>(device);
}

void* g_page = nullptr; // MAP_SHARED before fork: the same page in both processes

int runner(int in, int out) {
  CHECK_RT(cudaSetDevice(0));
  CHECK_RT(cudaFree(nullptr));
  Setup setup;
  read_all(in, &setup, sizeof setup);
  void* flags = nullptr;
  CUdeviceptr go = 0;
  if (setup.host) {
    go = map_host_page(g_page);
  } else {
    CHECK_RT(cudaIpcOpenMemHandle(&flags, setup.flags, cudaIpcMemLazyEnablePeerAccess));
    go = reinterpret_cast<CUdeviceptr>(flags);
  }
  std::fprintf(stderr, "runner: flags mapped\n");
  const CUdeviceptr done = go + 4;
  const int max_n = 1 << 26;
  float *x, *y, *z;
  char* flush;
  const size_t flush_bytes = 256u << 20;
  CHECK_RT(cudaMalloc(&x, max_n * sizeof(float)));
  CHECK_RT(cudaMalloc(&y, max_n * sizeof(float)));
  CHECK_RT(cudaMalloc(&z, max_n * sizeof(float)));
  CHECK_RT(cudaMalloc(&flush, flush_bytes));
  CHECK_RT(cudaMemset(x, 0, max_n * sizeof(float)));
  CHECK_RT(cudaMemset(y, 0, max_n * sizeof(float)));
  cudaStream_t stream;
  CHECK_RT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CHECK_RT(cudaEventCreate(&a));
  CHECK_RT(cudaEventCreate(&b));
  // Load both kernels before any sample: a module loaded lazily at its first launch behind a
  // stream that waits on a value never loads (the launch blocks, the wait never ends).
  empty_kernel<<<1, 32, 0, stream>>>();
  vector_add<<<1, 256, 0, stream>>>(x, y, z, 1);
  CHECK_RT(cudaStreamSynchronize(stream));
  Reply ready{0};
  write_all(out, &ready, sizeof ready);
  for (;;) {
    Order order;
    read_all(in, &order, sizeof order);
    if (order.n < 0)
      break;
    CHECK_RT(cudaMemsetAsync(flush, static_cast<int>(order.id & 0xff), flush_bytes, stream));
    CHECK_DRV(cuStreamWaitValue32(stream, go, order.id, CU_STREAM_WAIT_VALUE_GEQ));
    CHECK_RT(cudaEventRecord(a, stream));
    if (order.n == 0)
      empty_kernel<<<1, 32, 0, stream>>>();
    else
      vector_add<<<(order.n + 255) / 256, 256, 0, stream>>>(x, y, z, order.n);
    CHECK_RT(cudaEventRecord(b, stream));
    CHECK_DRV(cuStreamWriteValue32(stream, done, order.id, CU_STREAM_WRITE_VALUE_DEFAULT));
    // Tell the trusted side the work is queued (it queues its bracket only then, so that its
    // wait never blocks on work not yet submitted), then wait for it like a runner would.
    Reply queued{0};
    write_all(out, &queued, sizeof queued);
    if (order.id == 1)
      std::fprintf(stderr, "runner: first sample queued\n");
    CHECK_RT(cudaStreamSynchronize(stream));
    Reply reply;
    CHECK_RT(cudaEventElapsedTime(&reply.runner_ms, a, b));
    write_all(out, &reply, sizeof reply);
  }
  return 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int trusted(int to_runner, int from_runner, int samples, bool host) {
  CHECK_RT(cudaSetDevice(0));
  CHECK_RT(cudaFree(nullptr));
  int mem_ops = 0;
  CHECK_DRV(cuDeviceGetAttribute(&mem_ops, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, 0));
  Setup setup{};
  setup.host = host;
  CUdeviceptr go = 0;
  if (host) {
    go = map_host_page(g_page);
  } else {
    void* flags = nullptr;
    CHECK_RT(cudaMalloc(&flags, 256));
    CHECK_RT(cudaMemset(flags, 0, 256));
    CHECK_RT(cudaDeviceSynchronize());
    CHECK_RT(cudaIpcGetMemHandle(&setup.flags, flags));
    go = reinterpret_cast<CUdeviceptr>(flags);
  }
  write_all(to_runner, &setup, sizeof setup);
  Reply ready;
  read_all(from_runner, &ready, sizeof ready);
  const CUdeviceptr done = go + 4;
  cudaStream_t stream;
  CHECK_RT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t e1, e2;
  CHECK_RT(cudaEventCreate(&e1));
  CHECK_RT(cudaEventCreate(&e2));
  // A stand-in for writing the sample's inputs: a small copy in the trusted stream before E1.
  void* staging = nullptr;
  CHECK_RT(cudaMalloc(&staging, 1 << 20));
  std::printf("flags in %s; stream wait-value (NOR) supported: %d\n",
              host ? "shared host memory" : "device memory (CUDA IPC)", mem_ops);
  std::printf("%-14s %8s %12s %12s %12s %8s %12s\n", "kernel", "samples", "runner us", "bracket us",
              "diff us", "ratio", "diff p90 us");
  unsigned id = 0;
  const int sizes[] = {0, 1 << 20, 1 << 24, 1 << 26};
  for (int n : sizes) {
    std::vector<double> runner_us, bracket_us, diff_us;
    for (int s = 0; s < samples + 5; ++s) {
      alarm(10); // a bracket that never closes ends the run with SIGALRM, not a hang
      Order order{n, ++id};
      write_all(to_runner, &order, sizeof order);
      Reply queued;
      read_all(from_runner, &queued, sizeof queued);
      CHECK_RT(cudaMemsetAsync(staging, s & 0xff, 1 << 20, stream));
      CHECK_RT(cudaEventRecord(e1, stream));
      CHECK_DRV(cuStreamWriteValue32(stream, go, order.id, CU_STREAM_WRITE_VALUE_DEFAULT));
      CHECK_DRV(cuStreamWaitValue32(stream, done, order.id, CU_STREAM_WAIT_VALUE_GEQ));
      CHECK_RT(cudaEventRecord(e2, stream));
      CHECK_RT(cudaStreamSynchronize(stream));
      Reply reply;
      read_all(from_runner, &reply, sizeof reply);
      float bracket_ms = 0;
      CHECK_RT(cudaEventElapsedTime(&bracket_ms, e1, e2));
      if (s < 5)
        continue; // warm-up
      runner_us.push_back(reply.runner_ms * 1e3);
      bracket_us.push_back(bracket_ms * 1e3);
      diff_us.push_back((bracket_ms - reply.runner_ms) * 1e3);
    }
    std::vector<double> sorted = diff_us;
    std::sort(sorted.begin(), sorted.end());
    const double r = median(runner_us), b = median(bracket_us);
    std::printf("%-14s %8d %12.2f %12.2f %12.2f %8.3f %12.2f\n",
                n == 0 ? "empty"
                       : (n == (1 << 20) ? "add_1M" : (n == (1 << 24) ? "add_16M" : "add_64M")),
                samples, r, b, median(diff_us), b / r, sorted[sorted.size() * 9 / 10]);
  }
  Order stop{-1, 0};
  write_all(to_runner, &stop, sizeof stop);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  const int samples = argc > 1 ? std::atoi(argv[1]) : 200;
  const bool host = argc > 2 && std::strcmp(argv[2], "host") == 0;
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  g_page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_page == MAP_FAILED)
    return 1;
  std::memset(g_page, 0, 4096);
  int down[2], up[2];
  if (pipe(down) || pipe(up))
    return 1;
  // Fork before either process touches CUDA: a CUDA context does not survive fork.
  pid_t pid = fork();
  if (pid == 0) {
    close(down[1]);
    close(up[0]);
    return runner(down[0], up[1]);
  }
  close(down[0]);
  close(up[1]);
  int rc = trusted(down[1], up[0], samples, host);
  int status = 0;
  waitpid(pid, &status, 0);
  return rc ? rc : (WIFEXITED(status) ? WEXITSTATUS(status) : 4);
}

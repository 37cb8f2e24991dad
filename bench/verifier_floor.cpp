// The floor under a cuda-type job, by how its processes hold CUDA contexts: what a long-lived
// per-GPU trusted verifier (README, "The device verifier") would buy before anyone
// builds it. Each simulated job is the device skeleton of a cuda evaluate, nothing else: a trusted
// side allocates a buffer it can share, hands its descriptor to a runner, the runner maps it and
// writes it (a memset for the kernel), and the trusted side reads it back and checks it (the
// verdict); then the runner is killed, as a job's runners are at the handover.
//
//   fresh     keval today: both processes fresh, each making (and, as it dies, releasing) its own
//             context with one hardware work queue.
//   verifier  the proposal: the runner fresh as before; the per-job trusted process fresh but
//             without CUDA, asking a long-lived verifier process (one context, made once) to
//             allocate, export and read for it over a socket.
//
// Every process is exec'd, as keval's are, while a holder process keeps the driver initialised
// (keval serve's driver hold). Printed per structure: one job at a time (the client sends the next
// once the last one's processes are gone), ms from the job's start to its verdict and to the last
// of its processes reaped, median and 90th percentile; then `clients` jobs at once, jobs/min; and
// the ratios.
//
//   g++ -O2 -std=c++17 -pthread -I/usr/local/cuda/include -L/usr/local/cuda/lib64
//       -o /tmp/verifier_floor bench/verifier_floor.cpp -lcuda   (one command)
//   /tmp/verifier_floor [jobs=20] [clients=8] [jobs_at_once=80]
#include "driver_bench.hpp"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>

extern char** environ;

namespace {

using namespace driver_bench;

constexpr size_t kBufferBytes = 4u << 20; // a vector add's inputs and output, about
constexpr uint32_t kWritten = 7;
// Where a child finds the descriptors it was given (dup2'd there by posix_spawn).
constexpr int kFirstChildFd = 100;

[[noreturn]] void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

// One byte with room for one descriptor beside it: what both ends of a descriptor's passing use.
struct OneFdMessage {
  char tag = 0;
  char control[CMSG_SPACE(sizeof(int))] = {};
  iovec io{&tag, 1};
  msghdr message{};
  OneFdMessage() {
    message.msg_iov = &io;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof control;
  }
  OneFdMessage(const OneFdMessage&) = delete;
  OneFdMessage& operator=(const OneFdMessage&) = delete;
};

void send_fd(int socket, int fd, char tag) {
  OneFdMessage m;
  m.tag = tag;
  cmsghdr* header = CMSG_FIRSTHDR(&m.message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(header), &fd, sizeof(int));
  if (::sendmsg(socket, &m.message, MSG_NOSIGNAL) != 1)
    die("sendmsg");
}

// The descriptor sent with one byte; -1 where the peer closed instead.
int receive_fd(int socket) {
  OneFdMessage m;
  if (::recvmsg(socket, &m.message, MSG_CMSG_CLOEXEC) <= 0)
    return -1;
  cmsghdr* header = CMSG_FIRSTHDR(&m.message);
  if (header == nullptr || header->cmsg_type != SCM_RIGHTS)
    die("recvmsg: no descriptor");
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(header), sizeof(int));
  return fd;
}

char read_byte(int fd) {
  char byte = 0;
  if (::read(fd, &byte, 1) != 1)
    return 0;
  return byte;
}

void write_byte(int fd, char byte) {
  if (::write(fd, &byte, 1) != 1)
    die("write");
}

CUmemAllocationProp shareable_on_device_0() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

// A buffer of kBufferBytes mapped in this process, made here or imported from a descriptor.
struct Mapped {
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr address = 0;
  size_t bytes = 0;

  void map() {
    const CUmemAllocationProp prop = shareable_on_device_0();
    check(cuMemAddressReserve(&address, bytes, 0, 0, 0), "cuMemAddressReserve");
    check(cuMemMap(address, bytes, 0, handle, 0), "cuMemMap");
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    check(cuMemSetAccess(address, bytes, &access, 1), "cuMemSetAccess");
  }
  static Mapped make() {
    const CUmemAllocationProp prop = shareable_on_device_0();
    size_t granularity = 0;
    check(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
          "cuMemGetAllocationGranularity");
    Mapped m;
    m.bytes = (kBufferBytes + granularity - 1) / granularity * granularity;
    check(cuMemCreate(&m.handle, m.bytes, &prop, 0), "cuMemCreate");
    m.map();
    check(cuMemsetD32(m.address, 0, kBufferBytes / 4), "cuMemsetD32");
    return m;
  }
  static Mapped import(int fd) {
    Mapped m;
    check(cuMemImportFromShareableHandle(&m.handle, reinterpret_cast<void*>(intptr_t(fd)),
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
          "cuMemImportFromShareableHandle");
    const CUmemAllocationProp prop = shareable_on_device_0();
    size_t granularity = 0;
    check(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
          "cuMemGetAllocationGranularity");
    m.bytes = (kBufferBytes + granularity - 1) / granularity * granularity;
    m.map();
    return m;
  }
  int exported() const {
    int fd = -1;
    check(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
          "cuMemExportToShareableHandle");
    return fd;
  }
  // The verdict: every word the runner was to write, read back here.
  bool written() const {
    std::vector<uint32_t> host(kBufferBytes / 4);
    check(cuMemcpyDtoH(host.data(), address, kBufferBytes), "cuMemcpyDtoH");
    for (uint32_t word : host)
      if (word != kWritten)
        return false;
    return true;
  }
  void release() {
    check(cuMemUnmap(address, bytes), "cuMemUnmap");
    check(cuMemAddressFree(address, bytes), "cuMemAddressFree");
    check(cuMemRelease(handle), "cuMemRelease");
  }
};

// The runner: maps what it is sent, writes it (the kernel), says so, and waits to be killed.
[[noreturn]] void runner(int trusted) {
  open_context(true);
  const int fd = receive_fd(trusted);
  if (fd < 0)
    die("runner: no buffer");
  Mapped buffer = Mapped::import(fd);
  ::close(fd);
  check(cuMemsetD32(buffer.address, kWritten, kBufferBytes / 4), "cuMemsetD32");
  check(cuCtxSynchronize(), "cuCtxSynchronize");
  write_byte(trusted, 'd');
  for (;;)
    ::pause();
}

// Today's trusted worker: a context of its own, made and released in this process.
[[noreturn]] void fresh_trusted(int runner_socket, int verdict) {
  const CUdevice device = open_context(true);
  Mapped buffer = Mapped::make();
  const int fd = buffer.exported();
  send_fd(runner_socket, fd, 'b');
  ::close(fd);
  if (read_byte(runner_socket) != 'd')
    die("trusted: the runner did not finish");
  write_byte(verdict, buffer.written() ? '1' : '0');
  buffer.release();
  check(cuDevicePrimaryCtxRelease(device), "cuDevicePrimaryCtxRelease");
  ::_exit(0);
}

// The proposal's per-job trusted process: no CUDA; the verifier allocates and reads for it.
[[noreturn]] void relay(int verifier, int runner_socket, int verdict) {
  write_byte(verifier, 'a');
  const int fd = receive_fd(verifier);
  if (fd < 0)
    die("relay: no buffer from the verifier");
  send_fd(runner_socket, fd, 'b');
  ::close(fd);
  if (read_byte(runner_socket) != 'd')
    die("relay: the runner did not finish");
  write_byte(verifier, 'c');
  write_byte(verdict, read_byte(verifier));
  ::_exit(0); // closing the connection ends the job at the verifier, which frees its buffer
}

// One job's connection at the verifier: allocate and export ('a'), read back and check ('c'),
// until the job's process closes it; then its buffer goes.
void serve(int connection, CUcontext context) {
  check(cuCtxSetCurrent(context), "cuCtxSetCurrent");
  std::optional<Mapped> buffer;
  for (char command; (command = read_byte(connection)) != 0;) {
    if (command == 'a' && !buffer) {
      buffer = Mapped::make();
      const int fd = buffer->exported();
      send_fd(connection, fd, 'b');
      ::close(fd);
    } else if (command == 'c' && buffer) {
      write_byte(connection, buffer->written() ? '1' : '0');
    } else {
      break;
    }
  }
  if (buffer)
    buffer->release();
  ::close(connection);
}

// The long-lived verifier: one context, made once; a thread per job, each connection sent on
// `control` by the bench.
[[noreturn]] void verifier(int control) {
  const CUdevice device = open_context(true);
  CUcontext context = nullptr;
  check(cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  write_byte(control, 'r');
  for (int connection; (connection = receive_fd(control)) >= 0;)
    std::thread(serve, connection, context).detach();
  ::_exit(0);
}

pid_t spawn(const std::vector<std::string>& args, const std::vector<int>& fds) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (size_t k = 0; k < fds.size(); ++k)
    posix_spawn_file_actions_adddup2(&actions, fds[k], kFirstChildFd + static_cast<int>(k));
  std::vector<char*> argv;
  for (const auto& arg : args)
    argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ) != 0)
    die("posix_spawn");
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

void socket_pair(int fds[2]) {
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    die("socketpair");
}

struct JobTimes {
  double verdict_ms = 0, reaped_ms = 0;
};

class Bench {
public:
  explicit Bench(bool with_verifier) : with_verifier_(with_verifier) {
    if (!with_verifier_)
      return;
    int control[2];
    socket_pair(control);
    verifier_pid_ = spawn({"verifier_floor", "child", "verifier"}, {control[1]});
    ::close(control[1]);
    control_ = control[0];
    if (read_byte(control_) != 'r')
      die("the verifier did not start");
  }
  ~Bench() {
    if (!with_verifier_)
      return;
    ::close(control_);
    ::kill(verifier_pid_, SIGKILL);
    int status = 0;
    ::waitpid(verifier_pid_, &status, 0);
  }

  JobTimes job() {
    const auto start = Clock::now();
    int to_runner[2], verdict[2];
    socket_pair(to_runner);
    if (::pipe2(verdict, O_CLOEXEC) != 0)
      die("pipe2");
    pid_t trusted = 0;
    if (with_verifier_) {
      int to_verifier[2];
      socket_pair(to_verifier);
      {
        std::lock_guard lock(control_mutex_);
        send_fd(control_, to_verifier[1], 'j');
      }
      ::close(to_verifier[1]);
      trusted =
          spawn({"verifier_floor", "child", "relay"}, {to_verifier[0], to_runner[0], verdict[1]});
      ::close(to_verifier[0]);
    } else {
      trusted = spawn({"verifier_floor", "child", "trusted"}, {to_runner[0], verdict[1]});
    }
    const pid_t runner_pid = spawn({"verifier_floor", "child", "runner"}, {to_runner[1]});
    ::close(to_runner[0]);
    ::close(to_runner[1]);
    ::close(verdict[1]);
    const char said = read_byte(verdict[0]);
    JobTimes times;
    times.verdict_ms = ms(start, Clock::now());
    ::close(verdict[0]);
    if (said != '1') {
      std::fprintf(stderr, "a job's verdict was '%c', not '1'\n", said == 0 ? '-' : said);
      std::exit(1);
    }
    ::kill(runner_pid, SIGKILL); // the handover: the job's runner is done with
    int status = 0;
    ::waitpid(runner_pid, &status, 0);
    ::waitpid(trusted, &status, 0);
    times.reaped_ms = ms(start, Clock::now());
    return times;
  }

private:
  bool with_verifier_;
  pid_t verifier_pid_ = 0;
  int control_ = -1;
  std::mutex control_mutex_;
};

struct Row {
  double verdict_p50 = 0, verdict_p90 = 0, reaped_p50 = 0, reaped_p90 = 0, per_minute = 0;
};

Row measure(bool with_verifier, int jobs, int clients, int jobs_at_once) {
  Bench bench(with_verifier);
  bench.job(); // the first one loads what every later one finds loaded
  std::vector<double> verdicts, reaped;
  for (int k = 0; k < jobs; ++k) {
    const JobTimes t = bench.job();
    verdicts.push_back(t.verdict_ms);
    reaped.push_back(t.reaped_ms);
  }
  std::atomic<int> left{jobs_at_once};
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&] {
      while (left.fetch_sub(1) > 0)
        bench.job();
    });
  for (auto& thread : threads)
    thread.join();
  Row row;
  row.verdict_p50 = percentile(verdicts, 0.5);
  row.verdict_p90 = percentile(verdicts, 0.9);
  row.reaped_p50 = percentile(reaped, 0.5);
  row.reaped_p90 = percentile(reaped, 0.9);
  row.per_minute = jobs_at_once / (ms(start, Clock::now()) / 60000.0);
  return row;
}

int child(const std::string& role) {
  const int a = kFirstChildFd, b = kFirstChildFd + 1, c = kFirstChildFd + 2;
  if (role == "runner")
    runner(a);
  if (role == "trusted")
    fresh_trusted(a, b);
  if (role == "relay")
    relay(a, b, c);
  if (role == "verifier")
    verifier(a);
  std::fprintf(stderr, "unknown role %s\n", role.c_str());
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "child")
    return child(argv[2]);
  const int jobs = argc > 1 ? std::atoi(argv[1]) : 20;
  const int clients = argc > 2 ? std::atoi(argv[2]) : 8;
  const int jobs_at_once = argc > 3 ? std::atoi(argv[3]) : 80;
  const pid_t holder = hold_driver();
  const Row fresh = measure(false, jobs, clients, jobs_at_once);
  const Row proposal = measure(true, jobs, clients, jobs_at_once);
  ::kill(holder, SIGKILL);
  int status = 0;
  ::waitpid(holder, &status, 0);
  std::printf("%d jobs one at a time (ms, p50 / p90), then %d jobs from %d clients\n", jobs,
              jobs_at_once, clients);
  std::printf("%-34s %17s %17s %12s\n", "", "to the verdict", "to all reaped", "jobs/min");
  for (const auto& [label, row] :
       {std::pair{"fresh (two contexts a job)", fresh}, {"verifier (one context a job)", proposal}})
    std::printf("%-34s %8.1f / %6.1f %8.1f / %6.1f %12.1f\n", label, row.verdict_p50,
                row.verdict_p90, row.reaped_p50, row.reaped_p90, row.per_minute);
  std::printf("%-34s %8.2f %17.2f %21.2f\n", "ratio verifier / fresh",
              proposal.verdict_p50 / fresh.verdict_p50, proposal.reaped_p50 / fresh.reaped_p50,
              proposal.per_minute / fresh.per_minute);
  return 0;
}

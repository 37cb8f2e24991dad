#include "worker/isolation/detail/seccomp.hpp"

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace keval::worker::isolation::detail {

namespace {

#if defined(__x86_64__)
constexpr uint32_t kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kArch = AUDIT_ARCH_AARCH64;
#else
#define KEVAL_NO_SECCOMP_ARCH 1
#endif

// Calls that reach into other processes (ptrace, process_vm_*), load code into the kernel or
// observe it (kexec, modules, bpf, perf_event_open), change what the filesystem or namespaces look
// like (mount family, chroot, unshare, setns), or touch machine-wide state. None is needed to run
// or build a kernel; each fails with EPERM, so honest code sees an error, not a kill.
constexpr long kDenied[] = {
    SYS_ptrace,
    SYS_process_vm_readv,
    SYS_process_vm_writev,
    SYS_kexec_load,
#ifdef SYS_kexec_file_load
    SYS_kexec_file_load,
#endif
    SYS_bpf,
    SYS_perf_event_open,
    SYS_mount,
    SYS_umount2,
    SYS_pivot_root,
    SYS_chroot,
    SYS_unshare,
    SYS_setns,
    SYS_init_module,
    SYS_finit_module,
    SYS_delete_module,
    SYS_swapon,
    SYS_swapoff,
    SYS_reboot,
    SYS_acct,
    SYS_quotactl,
    SYS_add_key,
    SYS_request_key,
    SYS_keyctl,
    SYS_open_by_handle_at,
    SYS_syslog,
    SYS_settimeofday,
    SYS_clock_settime,
    SYS_clock_adjtime,
    SYS_adjtimex,
    SYS_userfaultfd,
    SYS_vhangup,
#ifdef SYS_iopl
    SYS_iopl,
    SYS_ioperm,
#endif
#ifdef SYS_io_uring_setup // io_uring performs operations this filter would never see
    SYS_io_uring_setup,
    SYS_io_uring_enter,
    SYS_io_uring_register,
#endif
#ifdef SYS_move_mount
    SYS_move_mount,
    SYS_open_tree,
    SYS_fsopen,
    SYS_fsconfig,
    SYS_fsmount,
    SYS_fspick,
#endif
#ifdef SYS_mount_setattr
    SYS_mount_setattr,
#endif
};

constexpr uint32_t kNamespaceFlags = CLONE_NEWNS | CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID |
                                     CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;

sock_filter stmt(uint16_t code, uint32_t k) {
  return BPF_STMT(code, k);
}
sock_filter jump(uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) {
  return BPF_JUMP(code, k, jt, jf);
}

constexpr uint32_t kAllow = SECCOMP_RET_ALLOW;
// prctl's option for syscall user dispatch (Linux 5.11); older headers lack the name.
constexpr uint32_t kPrSetSyscallUserDispatch = 59;
constexpr uint32_t errno_ret(int e) {
  return SECCOMP_RET_ERRNO | (static_cast<uint32_t>(e) & SECCOMP_RET_DATA);
}

#ifndef KEVAL_NO_SECCOMP_ARCH
// Every filter starts so: the architecture checked, the call's number loaded.
std::vector<sock_filter> program_prologue() {
  std::vector<sock_filter> p;
  // A call made through another ABI (int 0x80 from x86-64) would be read with the wrong numbers:
  // the process is killed instead.
  p.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)));
  p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0));
  p.push_back(stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
  p.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
#if defined(__x86_64__)
  // x32 system calls (bit 30) are the same calls under other numbers.
  p.push_back(jump(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1));
  p.push_back(stmt(BPF_RET | BPF_K, errno_ret(EPERM)));
#endif
  return p;
}

// The low 32 bits of argument `i` (descriptors and fcntl/prctl commands are ints; x86-64 and
// arm64 are little-endian).
sock_filter load_arg(int i) {
  return stmt(BPF_LD | BPF_W | BPF_ABS,
              static_cast<uint32_t>(offsetof(seccomp_data, args) + i * sizeof(uint64_t)));
}

// Calls that set another process's scheduling: its priority, policy, CPUs, resource limits. The
// kernel lets a process of the same uid make them, and runners share one where keval is not root
// (or its runner uids fall back to the job uid): a candidate could otherwise renice the reference
// to 19, make it SCHED_IDLE or pin it to one busy CPU for the whole job (its time grows under the
// load of a batch), or cut the trusted worker's CPU limit. Each is allowed on the caller's own
// process (0 or its pid), the pid in argument `pid_arg` (setpriority and ioprio_set: their `who`
// with `which` PRIO_PROCESS / IOPRIO_WHO_PROCESS); anything else fails with EPERM. A thread named
// by its own tid is refused too: honest code names itself by 0.
struct SchedulingCall {
  long nr;
  int pid_arg;
  int which_arg;      // -1: none
  uint32_t which_own; // the `which` that names one process
};
constexpr int kIoprioWhoProcess = 1; // linux/ioprio.h, which not every libc ships
constexpr SchedulingCall kSchedulingCalls[] = {
    {SYS_setpriority, 1, 0, PRIO_PROCESS},
    {SYS_sched_setscheduler, 0, -1, 0},
    {SYS_sched_setparam, 0, -1, 0},
#ifdef SYS_sched_setattr
    {SYS_sched_setattr, 0, -1, 0},
#endif
    {SYS_sched_setaffinity, 0, -1, 0},
    {SYS_prlimit64, 0, -1, 0},
    {SYS_ioprio_set, 1, 0, kIoprioWhoProcess},
};

std::vector<sock_filter> build_program() {
  std::vector<sock_filter> p = program_prologue();
  for (long nr : kDenied) {
    p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1));
    p.push_back(stmt(BPF_RET | BPF_K, errno_ret(EPERM)));
  }
  // The block of one call: [which == own] and pid in {0, own pid}, else EPERM. A forked child
  // inherits the filter with its parent's pid: it may name its parent (the same side) or itself.
  const auto own_pid = static_cast<uint32_t>(::getpid());
  for (const SchedulingCall& call : kSchedulingCalls) {
    const bool has_which = call.which_arg >= 0;
    p.push_back(
        jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(call.nr), 0, has_which ? 7 : 5));
    if (has_which) {
      p.push_back(load_arg(call.which_arg));
      p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, call.which_own, 0, 3)); // else denied
    }
    p.push_back(load_arg(call.pid_arg));
    p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, 0, 2, 0));       // itself: allowed
    p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, own_pid, 1, 0)); // its pid: allowed
    p.push_back(stmt(BPF_RET | BPF_K, errno_ret(EPERM)));
    p.push_back(stmt(BPF_RET | BPF_K, kAllow));
  }
  // clone3 passes its flags in memory a filter cannot read: ENOSYS makes libc fall back to
  // clone, whose flags it can.
  p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1));
  p.push_back(stmt(BPF_RET | BPF_K, errno_ret(ENOSYS)));
  // clone: no new namespaces (flags are the first argument on x86-64 and arm64).
  p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 4));
  p.push_back(load_arg(0));
  p.push_back(jump(BPF_JMP | BPF_JSET | BPF_K, kNamespaceFlags, 0, 1));
  p.push_back(stmt(BPF_RET | BPF_K, errno_ret(EPERM)));
  p.push_back(stmt(BPF_RET | BPF_K, kAllow));
  // socket: Unix sockets only (the family is the first argument).
  p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 0, 4));
  p.push_back(load_arg(0));
  p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 0, 1));
  p.push_back(stmt(BPF_RET | BPF_K, kAllow));
  p.push_back(stmt(BPF_RET | BPF_K, errno_ret(EAFNOSUPPORT)));
  p.push_back(stmt(BPF_RET | BPF_K, kAllow));
  return p;
}

// Each block below starts with the call's number still in the accumulator: a call that is not
// the block's skips it whole; one that is ends in the block, allowed or denied.
std::vector<sock_filter> build_channel_guard(uint32_t fd) {
  const uint32_t deny = errno_ret(EPERM);
  std::vector<sock_filter> p = program_prologue();
  // close(fd), and dup2/dup3 onto it (the new descriptor is the second argument).
  const auto argument_is_fd = [&](long nr, int arg) {
    p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 4));
    p.push_back(load_arg(arg));
    p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, fd, 0, 1));
    p.push_back(stmt(BPF_RET | BPF_K, deny));
    p.push_back(stmt(BPF_RET | BPF_K, kAllow));
  };
  // Calls `nr` for which both conditions on its arguments hold: `holds` says whether a condition
  // holds when its comparison is true or when it is false.
  struct Condition {
    int arg;
    uint16_t comparison; // BPF_JEQ, BPF_JGT, BPF_JGE
    uint32_t value;
    bool holds;
  };
  const auto deny_when_both = [&](long nr, Condition first, Condition second, uint32_t refusal) {
    const auto branch = [](bool holds, uint8_t skip) {
      return std::pair<uint8_t, uint8_t>{holds ? 0 : skip, holds ? skip : 0};
    };
    p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 6));
    p.push_back(load_arg(first.arg));
    const auto [t1, f1] = branch(first.holds, 3); // on to the second, else allowed
    p.push_back(jump(BPF_JMP | first.comparison | BPF_K, first.value, t1, f1));
    p.push_back(load_arg(second.arg));
    const auto [t2, f2] = branch(second.holds, 1); // denied, else allowed
    p.push_back(jump(BPF_JMP | second.comparison | BPF_K, second.value, t2, f2));
    p.push_back(stmt(BPF_RET | BPF_K, refusal));
    p.push_back(stmt(BPF_RET | BPF_K, kAllow));
  };
  argument_is_fd(SYS_close, 0);
#ifdef SYS_dup2
  argument_is_fd(SYS_dup2, 1);
#endif
  argument_is_fd(SYS_dup3, 1);
  // fcntl(fd, F_SETFD, ...): clearing close-on-exec would hand the channel to a program of the
  // kernel's choosing that replaced this one.
  deny_when_both(SYS_fcntl, {0, BPF_JEQ, fd, true}, {1, BPF_JEQ, F_SETFD, true}, deny);
#ifdef SYS_close_range
  // close_range(first, last, flags) with first <= fd <= last (unsigned, as the kernel reads
  // them). ENOSYS, not EPERM: what closes "every descriptor from 3" (a child's closefrom,
  // Python's subprocess, Rust's and GLib's spawns) takes ENOSYS for a kernel without the call
  // and closes one descriptor at a time, where some take EPERM for a failure.
  deny_when_both(SYS_close_range, {0, BPF_JGT, fd, false}, {1, BPF_JGE, fd, true},
                 errno_ret(ENOSYS));
#endif
  // No later filter (SECCOMP_RET_USER_NOTIF, TRAP or ERRNO on the runner's own sendmsg), no
  // syscall user dispatch (SIGSYS for every call made outside a chosen code range) and no ptrace
  // (a child the runner allowed with PR_SET_PTRACER could stop it at each call): also with the
  // sandbox off, where the first filter is not installed.
  for (long nr : {SYS_seccomp, SYS_ptrace}) {
    p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1));
    p.push_back(stmt(BPF_RET | BPF_K, deny));
  }
  p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_prctl, 0, 5));
  p.push_back(load_arg(0));
  p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, PR_SET_SECCOMP, 2, 0));
  p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, kPrSetSyscallUserDispatch, 1, 0));
  p.push_back(stmt(BPF_RET | BPF_K, kAllow));
  p.push_back(stmt(BPF_RET | BPF_K, deny));
  p.push_back(stmt(BPF_RET | BPF_K, kAllow));
  return p;
}

SeccompLayer install(std::vector<sock_filter> program) {
  SeccompLayer out;
  sock_fprog prog{static_cast<unsigned short>(program.size()), program.data()};
  if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0) {
    out.detail = std::string("seccomp(SECCOMP_SET_MODE_FILTER): ") + std::strerror(errno);
    return out;
  }
  out.active = true;
  return out;
}
#endif

} // namespace

SeccompLayer install_seccomp_filter() {
  SeccompLayer out;
#ifdef KEVAL_NO_SECCOMP_ARCH
  out.detail = "no seccomp filter is written for this CPU architecture";
  return out;
#else
  out = install(build_program());
  if (!out.active)
    return out;
  out.detail = "denies ptrace, process_vm_readv/writev, kexec, modules, bpf, perf_event_open, "
               "mount and namespace calls, io_uring, keyctl, clock and reboot calls, and setting "
               "another process's priority, scheduling, CPUs or resource limits (EPERM); socket "
               "families other than AF_UNIX (EAFNOSUPPORT)";
  return out;
#endif
}

SeccompLayer install_channel_guard(int channel_fd) {
  SeccompLayer out;
#ifdef KEVAL_NO_SECCOMP_ARCH
  (void)channel_fd;
  out.detail = "no seccomp filter is written for this CPU architecture";
  return out;
#else
  if (channel_fd < 0) {
    out.detail = "no channel descriptor to guard";
    return out;
  }
  out = install(build_channel_guard(static_cast<uint32_t>(channel_fd)));
  if (!out.active)
    return out;
  out.detail = "descriptor " + std::to_string(channel_fd) +
               " (close-on-exec) cannot be closed, replaced or made inheritable (EPERM; "
               "close_range over it ENOSYS); no seccomp filter, syscall user dispatch or ptrace "
               "can intercept the runner (EPERM)";
  return out;
#endif
}

} // namespace keval::worker::isolation::detail

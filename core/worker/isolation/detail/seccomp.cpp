#include "worker/isolation/detail/seccomp.hpp"

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
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
constexpr uint32_t errno_ret(int e) {
  return SECCOMP_RET_ERRNO | (static_cast<uint32_t>(e) & SECCOMP_RET_DATA);
}

#ifndef KEVAL_NO_SECCOMP_ARCH
std::vector<sock_filter> build_program() {
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
  for (long nr : kDenied) {
    p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1));
    p.push_back(stmt(BPF_RET | BPF_K, errno_ret(EPERM)));
  }
  // clone3 passes its flags in memory a filter cannot read: ENOSYS makes libc fall back to
  // clone, whose flags it can.
  p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1));
  p.push_back(stmt(BPF_RET | BPF_K, errno_ret(ENOSYS)));
  // clone: no new namespaces (flags are the first argument on x86-64 and arm64).
  p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 4));
  p.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])));
  p.push_back(jump(BPF_JMP | BPF_JSET | BPF_K, kNamespaceFlags, 0, 1));
  p.push_back(stmt(BPF_RET | BPF_K, errno_ret(EPERM)));
  p.push_back(stmt(BPF_RET | BPF_K, kAllow));
  // socket: Unix sockets only (the family is the first argument).
  p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 0, 4));
  p.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])));
  p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 0, 1));
  p.push_back(stmt(BPF_RET | BPF_K, kAllow));
  p.push_back(stmt(BPF_RET | BPF_K, errno_ret(EAFNOSUPPORT)));
  p.push_back(stmt(BPF_RET | BPF_K, kAllow));
  return p;
}
#endif

} // namespace

SeccompLayer install_seccomp_filter() {
  SeccompLayer out;
#ifdef KEVAL_NO_SECCOMP_ARCH
  out.detail = "no seccomp filter is written for this CPU architecture";
  return out;
#else
  std::vector<sock_filter> program = build_program();
  sock_fprog prog{static_cast<unsigned short>(program.size()), program.data()};
  if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0) {
    out.detail = std::string("seccomp(SECCOMP_SET_MODE_FILTER): ") + std::strerror(errno);
    return out;
  }
  out.active = true;
  out.detail = "denies ptrace, process_vm_readv/writev, kexec, modules, bpf, perf_event_open, "
               "mount and namespace calls, io_uring, keyctl, clock and reboot calls (EPERM); "
               "socket families other than AF_UNIX (EAFNOSUPPORT)";
  return out;
#endif
}

} // namespace keval::worker::isolation::detail

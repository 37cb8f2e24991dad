/*
 * keval plugin SDK — the C ABI between keval-worker and a kernel-type plugin.
 *
 * A plugin is a shared object exporting exactly one symbol, KEVAL_PLUGIN_ENTRY_NAME, that
 * returns a pointer to a static keval_plugin_api table. Everything else in the library stays
 * hidden (-fvisibility=hidden). The boundary is plain C so that plugins built with another
 * compiler or standard library keep working (the pattern of PJRT's C API and Vulkan ICDs).
 *
 * Versioning rules (what changed in each version: CHANGELOG.md beside this header):
 *   - keval_plugin_api.api_major must equal the host's KEVAL_PLUGIN_API_MAJOR;
 *     keval_plugin_api.api_minor must not exceed the host's KEVAL_PLUGIN_API_MINOR.
 *   - api_minor is the oldest minor version whose hosts can run the plugin: the newest feature
 *     it uses (KEVAL_PLUGIN_API_MINOR_* below), not the header it was built with, so that an
 *     unchanged plugin rebuilt against newer headers still loads in older hosts.
 *   - Every struct starts with `struct_size`. Fields are only ever appended. A reader accesses a
 *     field only when struct_size covers it (KEVAL_STRUCT_HAS), so old and new binaries mix.
 *
 * Threading and process rules (what the host guarantees, and plugins may rely on):
 *   - One job per process: a plugin is loaded into a process (a runner) that serves one side of
 *     one job and exits. Globals, caches and interpreters may live for the process; nothing of one
 *     job can reach the next. prewarm() runs, at most once, before that job is known.
 *   - One thread calls in: every entry point is called from the runner's single serving thread,
 *     never concurrently, in the order manifest, [prewarm, [warm_device]], compile, bind_device,
 *     then any number of default_inputs and launch calls, then kernel_destroy. A plugin needs no
 *     locking for calls from the host; threads it starts itself are its own to manage.
 *   - manifest() may also run in a short-lived probe process that calls nothing else.
 *   - The device context: bind_device, default_inputs and launch run with the granted device's
 *     context current on the calling thread; compile runs before any device exists for the job.
 *   - Streams: launch enqueues on args->stream, the same stream bind_device received; the host
 *     synchronises that stream, times it, and may capture it into a CUDA graph (so a launch must
 *     not synchronise it or allocate from a non-graph-safe allocator when it can avoid it: it is
 *     then timed with events instead).
 *
 * Ownership rules (each pointer below says which applies):
 *   - "borrowed, call": valid only for the duration of the call that received it.
 *   - "plugin-owned, static": valid while the library stays loaded.
 *   - Errors are allocated by the plugin and released by the host through error_destroy.
 *   - Kernels are allocated by compile() and released by kernel_destroy().
 *   - Tensors returned by a plugin are DLPack-style managed tensors released by their deleter.
 *
 * Errors never cross as C++ exceptions: every fallible call returns NULL on success or a
 * keval_error*.
 */
#ifndef KEVAL_PLUGIN_H
#define KEVAL_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KEVAL_PLUGIN_API_MAJOR 1
#define KEVAL_PLUGIN_API_MINOR 4 /* the newest minor version this header describes */

/* The minor version that introduced each optional feature: a plugin's api_minor is the largest of
 * those it uses (0 when it uses none). */
#define KEVAL_PLUGIN_API_MINOR_PREWARM 1 /* keval_plugin_api.prewarm */
#define KEVAL_PLUGIN_API_MINOR_PROGRAM 2 /* KEVAL_CAP_PROGRAM, keval_plugin_api.plan_program */
/* KEVAL_CAP_ONE_STREAM: hosts before 1.3 ignore the bit, so a plugin that sets it need not raise
 * its api_minor for it. */
#define KEVAL_PLUGIN_API_MINOR_ONE_STREAM 3
/* keval_plugin_api.warm_device: hosts before 1.4 never call it, so a plugin that sets it need not
 * raise its api_minor for it. */
#define KEVAL_PLUGIN_API_MINOR_WARM_DEVICE 4

/* The one exported symbol. Its type is keval_plugin_entry_fn. */
#define KEVAL_PLUGIN_ENTRY_NAME "keval_plugin_entry_v1"

#if defined(_WIN32)
#define KEVAL_PLUGIN_EXPORT __declspec(dllexport)
#else
#define KEVAL_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* True when a struct of the given (reader-known) type, as sized by its producer, holds FIELD. */
#define KEVAL_STRUCT_HAS(ptr, type, field)                                                         \
  ((ptr) != NULL && (ptr)->struct_size >= offsetof(type, field) + sizeof(((type*)0)->field))

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                       */
/* ------------------------------------------------------------------------------------------ */

typedef enum keval_error_code {
  /* The submitted source does not compile (syntax error, missing kernel, ...). */
  KEVAL_ERROR_COMPILE = 1,
  /* The kernel failed while running (exception, CUDA error, ...). */
  KEVAL_ERROR_RUNTIME = 2,
  /* The request is not usable by this kernel type (missing IOContract, bad metadata, ...). */
  KEVAL_ERROR_INVALID_REQUEST = 3,
  /* The plugin cannot do this here (no device of the needed kind, optional entry absent). */
  KEVAL_ERROR_UNSUPPORTED = 4,
  /* The plugin or its environment is broken (not the user's fault). */
  KEVAL_ERROR_INTERNAL = 5
} keval_error_code;

typedef struct keval_error {
  size_t struct_size;
  int32_t code; /* keval_error_code */
  /* One-line summary. Plugin-owned, valid until error_destroy. Never NULL. */
  const char* message;
  /* Full compiler log or traceback, may be NULL. Plugin-owned, valid until error_destroy. */
  const char* details;
} keval_error;

/* ------------------------------------------------------------------------------------------ */
/* Tensors: the layout of DLPack's DLTensor / DLManagedTensor (v0.8), field for field, so a    */
/* plugin may reinterpret these as DLPack types and hand them to torch/cupy zero-copy.         */
/* ------------------------------------------------------------------------------------------ */

typedef enum keval_device_type {
  KEVAL_DEVICE_CPU = 1,  /* kDLCPU */
  KEVAL_DEVICE_CUDA = 2, /* kDLCUDA */
} keval_device_type;

typedef struct keval_dl_device {
  int32_t device_type; /* keval_device_type */
  int32_t device_id;
} keval_dl_device;

typedef enum keval_dtype_code {
  KEVAL_DTYPE_INT = 0,    /* kDLInt */
  KEVAL_DTYPE_UINT = 1,   /* kDLUInt */
  KEVAL_DTYPE_FLOAT = 2,  /* kDLFloat */
  KEVAL_DTYPE_BFLOAT = 4, /* kDLBfloat */
  KEVAL_DTYPE_BOOL = 6,   /* kDLBool */
} keval_dtype_code;

typedef struct keval_dl_dtype {
  uint8_t code;   /* keval_dtype_code */
  uint8_t bits;   /* 8, 16, 32, 64 */
  uint16_t lanes; /* always 1 */
} keval_dl_dtype;

typedef struct keval_dl_tensor {
  void* data; /* device or host pointer, per `device` */
  keval_dl_device device;
  int32_t ndim;
  keval_dl_dtype dtype;
  int64_t* shape;
  int64_t* strides; /* in elements; NULL means compact row-major */
  uint64_t byte_offset;
} keval_dl_tensor;

typedef struct keval_dl_managed_tensor {
  keval_dl_tensor dl_tensor;
  void* manager_ctx;
  /* Releases the tensor and everything it owns. May be NULL when nothing needs releasing. */
  void (*deleter)(struct keval_dl_managed_tensor* self);
} keval_dl_managed_tensor;

/* ------------------------------------------------------------------------------------------ */
/* Manifest                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* Capability bits of keval_manifest.capabilities. */
#define KEVAL_CAP_REQUIRES_IO_CONTRACT (1u << 0) /* requests without `io` are rejected (400) */
#define KEVAL_CAP_DEFAULT_INPUTS (1u << 1)       /* default_inputs() can produce inputs */
#define KEVAL_CAP_DEVICE_CUDA (1u << 2)          /* runs on CUDA devices */
#define KEVAL_CAP_DEVICE_CPU (1u << 3)           /* runs on the CPU */
#define KEVAL_CAP_RETURNS_OUTPUTS (1u << 4)      /* launch returns its outputs (torch style) */
#define KEVAL_CAP_NEEDS_PYTHON (1u << 5)         /* embeds Python (informational) */
/* Whole programs (1.2): the request carries files and commands, not a kernel and tensors
 * (docs/cuda_program.md). The plugin plans the build, test and benchmark (plan_program); the core
 * writes the workspace, runs each step in a sandboxed process and judges by exit status.
 * compile/bind_device/launch are never called for such a type. */
#define KEVAL_CAP_PROGRAM (1u << 6)
/* (1.3) Everything a launch runs goes on the stream the host passes, and nothing of the kernel's
 * can start work on another stream (device code only: no host code of the submitter's runs). The
 * host then opens the device with one hardware work queue (CUDA_DEVICE_MAX_CONNECTIONS=1), whose
 * context is made and torn down in about half the time of the default 8 (on an H100: 60 ms and
 * 25 ms against 135 ms and 73 ms). A type whose kernels may use streams of their own (Python
 * types, whole programs) must not set it: their streams would be serialised. */
#define KEVAL_CAP_ONE_STREAM (1u << 7)

typedef struct keval_manifest {
  size_t struct_size;
  /* The request's kernel_type this plugin serves, e.g. "cuda". Plugin-owned, static. */
  const char* kernel_type;
  /* The plugin's own version, semver text. Plugin-owned, static. */
  const char* plugin_version;
  /* One line for `keval plugins`. Plugin-owned, static. May be NULL. */
  const char* description;
  uint32_t capabilities; /* KEVAL_CAP_* */
} keval_manifest;

/* ------------------------------------------------------------------------------------------ */
/* Compilation                                                                                  */
/* ------------------------------------------------------------------------------------------ */

typedef struct keval_kernel keval_kernel; /* opaque, plugin-defined */

typedef struct keval_compile_args {
  size_t struct_size;
  /* Kernel source text, NUL-terminated. Borrowed, call. */
  const char* source_code;
  /* The request's `metadata` object as JSON text ("{}" when absent). Borrowed, call. */
  const char* metadata_json;
  /* The request's `io` IOContract as JSON text, or NULL when absent. Borrowed, call. */
  const char* io_contract_json;
  /* A private directory for this kernel's build files; removed after the job. Borrowed, call. */
  const char* work_dir;
  /* Target CUDA architecture as major*10+minor (90 for sm_90), or 0 when no CUDA device is
   * expected. Known before the device grant so compilation never holds a GPU. */
  int32_t cuda_arch;
  /* "ref" or "custom": which side of a comparison this kernel is. Borrowed, call. */
  const char* side;
} keval_compile_args;

typedef struct keval_compile_result {
  size_t struct_size;
  /* Set by the plugin: the compiled kernel, released with kernel_destroy. */
  keval_kernel* kernel;
  /* Set by the plugin: JSON object text with compile details for the result metadata (chosen
   * kernel name, compiler log, timings), or NULL. Valid until kernel_destroy(kernel). */
  const char* info_json;
} keval_compile_result;

/* ------------------------------------------------------------------------------------------ */
/* Device binding and launching                                                                 */
/* ------------------------------------------------------------------------------------------ */

typedef struct keval_device_args {
  size_t struct_size;
  keval_dl_device device;
  /* The CUstream the core measures (CUDA devices; NULL on the CPU). Opaque to the SDK. */
  void* stream;
} keval_device_args;

typedef enum keval_arg_kind {
  KEVAL_ARG_TENSOR = 0,
  KEVAL_ARG_INT = 1,
  KEVAL_ARG_FLOAT = 2,
  KEVAL_ARG_BOOL = 3,
  KEVAL_ARG_STR = 4
} keval_arg_kind;

typedef enum keval_arg_role {
  KEVAL_ROLE_INPUT = 0,
  KEVAL_ROLE_OUTPUT = 1,
  KEVAL_ROLE_INOUT = 2
} keval_arg_role;

/* One argument, in IOContract order. Borrowed, call (including the tensor it points to). */
typedef struct keval_arg {
  size_t struct_size;
  const char* name;
  int32_t kind;            /* keval_arg_kind */
  int32_t role;            /* keval_arg_role */
  int32_t is_meta;         /* Triton constexpr */
  keval_dl_tensor* tensor; /* KEVAL_ARG_TENSOR */
  int64_t int_value;       /* KEVAL_ARG_INT, KEVAL_ARG_BOOL (0/1) */
  double float_value;      /* KEVAL_ARG_FLOAT */
  const char* str_value;   /* KEVAL_ARG_STR */
} keval_arg;

typedef struct keval_launch_args {
  size_t struct_size;
  const keval_arg* args; /* Borrowed, call. */
  size_t num_args;
  /* The stream to enqueue on; the same as bound. NULL on the CPU. */
  void* stream;
  /* For plugins with KEVAL_CAP_RETURNS_OUTPUTS: the plugin writes up to `max_outputs` tensors it
   * produced into `outputs` and their number into *num_outputs. Ownership passes to the core,
   * which calls each tensor's deleter. NULL for plugins that write into output arguments. */
  keval_dl_managed_tensor** outputs;
  size_t max_outputs;
  size_t* num_outputs;
} keval_launch_args;

typedef struct keval_default_inputs_args {
  size_t struct_size;
  keval_dl_device device;
  void* stream;
  uint64_t seed; /* seeds the plugin's RNG so both sides of a compare get identical inputs */
  keval_dl_managed_tensor** inputs; /* written by the plugin; ownership passes to the core */
  size_t max_inputs;
  size_t* num_inputs;
} keval_default_inputs_args;

/* ------------------------------------------------------------------------------------------ */
/* Whole programs (1.2)                                                                         */
/* ------------------------------------------------------------------------------------------ */

typedef struct keval_program_args {
  size_t struct_size;
  /* The request's kernel `metadata` as JSON text ({problem, solution, benchmark}), checked by the
   * core (paths, sizes, shapes) before the plugin sees it. Borrowed, call. */
  const char* program_json;
  /* Which solution to plan: "solution" or "baseline" (the problem's baseline_solution). */
  const char* which;
  /* What the core knows of this machine as JSON text: {"cuda_arch": 90 (0: no GPU),
   * "gpu_name": "...", "gpu_count": 1}. Borrowed, call. */
  const char* environment_json;
} keval_program_args;

/* ------------------------------------------------------------------------------------------ */
/* The function table                                                                           */
/* ------------------------------------------------------------------------------------------ */

typedef struct keval_plugin_api {
  size_t struct_size;
  uint32_t api_major; /* KEVAL_PLUGIN_API_MAJOR the plugin was built with */
  uint32_t api_minor; /* the oldest minor version it runs on: the newest feature it uses */

  /* Releases an error returned by any call below. */
  void (*error_destroy)(keval_error* error);

  /* Describes the plugin. Must not initialise heavy dependencies (no CUDA context, no Python
   * interpreter): the worker calls it to probe plugins. The result is plugin-owned, static. */
  const keval_manifest* (*manifest)(void);

  /* Compiles source into a kernel. Runs before the device grant: no GPU context may be created.
   * KEVAL_ERROR_COMPILE means the user's source is at fault; details hold the full log. */
  keval_error* (*compile)(const keval_compile_args* args, keval_compile_result* result);

  /* Binds a compiled kernel to the granted device (module load, weights to device, ...). Called
   * once, after the grant, with the device's context current on the calling thread. */
  keval_error* (*bind_device)(keval_kernel* kernel, const keval_device_args* args);

  /* Produces the kernel's own default inputs (KEVAL_CAP_DEFAULT_INPUTS), else NULL entry. */
  keval_error* (*default_inputs)(keval_kernel* kernel, const keval_default_inputs_args* args);

  /* Runs the kernel once on the given arguments. Enqueues on args->stream and may return before
   * the work finishes; the core synchronises and times. */
  keval_error* (*launch)(keval_kernel* kernel, const keval_launch_args* args);

  /* Releases a kernel from compile(). NULL is ignored. */
  void (*kernel_destroy)(keval_kernel* kernel);

  /* --- 1.1 ----------------------------------------------------------------------------------- */

  /* Optional (NULL: nothing to do). Called at most once, before any compile(), in a worker that
   * is started ahead of its job (keval serve keeps a few ready): does the job-independent setup
   * that every job of this type would repeat, such as starting an interpreter and importing
   * frameworks. Must not create a GPU context or depend on any job. An error is logged and the
   * worker carries on (the job then does that setup itself). */
  keval_error* (*prewarm)(void);

  /* --- 1.2 ----------------------------------------------------------------------------------- */

  /* Whole-program types (KEVAL_CAP_PROGRAM) only, else NULL. Turns one program request into the
   * steps the core runs: the plugin knows what the type's problems mean, the core how to run
   * untrusted commands. Runs before any user code, may run tools (nvcc --version), must not
   * create a GPU context. On success *plan_json is JSON object text (docs/cuda_program.md,
   * "Plans"), plugin-owned, valid until the next call. KEVAL_ERROR_INVALID_REQUEST names what is
   * wrong with the program. */
  keval_error* (*plan_program)(const struct keval_program_args* args, const char** plan_json);

  /* --- 1.4 ----------------------------------------------------------------------------------- */

  /* Optional (NULL: nothing to do). Called at most once, after prewarm() and before any
   * compile(), in a worker started ahead of its job whose device was opened ahead: args names
   * that device (its context current on the calling thread) and the stream bind_device would
   * get. Does the job-independent device set-up that every job's first launches would pay on
   * the GPU otherwise: a framework's own initialisation on the device, its libraries' handles,
   * and the loading of its common kernels, which may be launched (on small inputs of the
   * plugin's own). Runs no user code, leaves no work queued (synchronise before returning) and
   * keeps nothing a job could see (memory is given back, random states are seeded again by the
   * job). The host calls it only while no job is timed on that GPU. An error is logged and
   * reported, and the worker carries on. */
  keval_error* (*warm_device)(const keval_device_args* args);
} keval_plugin_api;

typedef const keval_plugin_api* (*keval_plugin_entry_fn)(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KEVAL_PLUGIN_H */

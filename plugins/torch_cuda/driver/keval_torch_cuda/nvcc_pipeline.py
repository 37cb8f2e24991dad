"""One nvcc compile (``nvcc -c x.cu -o x.o``) with its two front ends run side by side.

For a single architecture nvcc runs its stages one after another, in three parts of about the
same length (plugins/torch_cuda/README.md, Measured):

    host preprocess -> cudafe++ (host front end)
    device preprocess -> cicc (device front end) -> ptxas -> fatbinary
    host compiler on cudafe++'s output

For a source that includes torch's headers, cudafe++ and cicc each parse all of them, and they do
not depend on each other except through the "module id" (a name for the translation unit that
both front ends put into internal symbols). Both compute it deterministically from the same
source, so here each chain runs in its own thread, cicc writing its own copy of the id, and the
host compile starts when both are done: one of the three parts comes off every cold build. (It
cannot start earlier: cudafe++'s output #includes the host stub, which cicc writes, and the fat
binary.)

The stages are nvcc's own (``nvcc --dryrun`` prints them with the environment it sets), so flags
and toolchain behave exactly as with nvcc. Anything that does not have the expected shape (a
future nvcc with another flow, several architectures) runs as plain nvcc; the two module ids are
compared and, should they ever differ, the device chain is re-run with cudafe++'s id. What was
done is returned, so the build record says which path ran.
"""
import os
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor


def _environment(env_lines):
    """The variables nvcc sets for its stages (PATH, CICC_PATH, NVVMIR_LIBRARY_DIR, ...), as
    literal values: the stages only refer to them by name, as in ``"$CICC_PATH/cicc"``."""
    env = dict(os.environ)
    for line in env_lines:
        name, value = line.split("=", 1)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"' and value.count('"') == 2:
            value = value[1:-1]
        env[name] = value
    return env


def _run_script(lines, env, cwd):
    """Runs nvcc's stage lines as one sh script (they are written for sh), stopping at the first
    that fails."""
    done = subprocess.run(["/bin/sh", "-c", "set -e\n" + "\n".join(lines)], cwd=cwd, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace")
    return done.returncode, done.stdout


def _dryrun(command, keep_dir, cwd):
    """nvcc's environment assignments and stage commands for ``command`` (with --keep)."""
    done = subprocess.run(command + ["--dryrun", "--keep", "--keep-dir", keep_dir], cwd=cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace")
    if done.returncode != 0:
        return None, None, f"nvcc --dryrun exited with status {done.returncode}"
    env_lines, stages = [], []
    for line in done.stdout.splitlines():
        if not line.startswith("#$ "):
            continue
        line = line[3:].strip()
        head = line.split(" ", 1)[0]
        if "=" in head and not head.startswith(("-", '"')) and head.split("=", 1)[0].isidentifier():
            env_lines.append(line)
        else:
            stages.append(line)
    return env_lines, stages, None


def _program(line):
    try:
        return os.path.basename(shlex.split(line)[0])
    except ValueError:
        return ""


def _plan(stages):
    """Splits nvcc's stages into (host front end chain, device chain, final host compile), or
    returns a reason why this flow is not the one understood here."""
    programs = [_program(s) for s in stages]
    fe = [i for i, p in enumerate(programs) if p == "cudafe++"]
    cicc = [i for i, p in enumerate(programs) if p == "cicc" or p.endswith("/cicc")]
    if len(fe) != 1 or len(cicc) != 1:
        return None, f"{len(fe)} cudafe++ and {len(cicc)} cicc stages (one of each expected)"
    fe, cicc = fe[0], cicc[0]
    if "--gen_module_id_file" not in stages[fe] or "--module_id_file_name" not in stages[cicc]:
        return None, "cudafe++ does not generate the module id that cicc reads"
    if not fe < cicc < len(stages) - 1 or " -c " not in stages[-1]:
        return None, "stages are not in the expected order"
    if any(p in ("nvlink", "cudafe++", "cicc") for p in programs[cicc + 1:-1]):
        return None, "unexpected stages after cicc"
    host_chain = stages[:fe + 1]
    device_chain = stages[fe + 1:-1]
    return (host_chain, device_chain, stages[-1]), None


def _own_module_id(cicc_line, path):
    """The cicc stage writing its own module id to ``path`` instead of reading cudafe++'s."""
    parts = shlex.split(cicc_line)
    at = parts.index("--module_id_file_name")
    parts[at + 1] = path
    parts.insert(at, "--gen_module_id_file")
    # shlex kept "$CICC_PATH/cicc" unexpanded (without its quotes): quoted again so that sh
    # expands it as nvcc's line would.
    program = f'"{parts[0]}"' if parts[0].startswith("$") else shlex.quote(parts[0])
    return " ".join([program] + [shlex.quote(p) for p in parts[1:]])


def compile_cuda(command, cwd):
    """Runs ``command`` (an ``nvcc -c SRC -o OBJ ...`` list). Returns (returncode, output,
    seconds, mode) where mode is "parallel front ends" or "nvcc (<why>)"."""
    started = time.monotonic()

    def plain(why):
        done = subprocess.run(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, errors="replace")
        return (done.returncode, done.stdout, round(time.monotonic() - started, 3),
                f"nvcc ({why})")

    keep_dir = os.path.join(cwd, "nvcc_stages_" + os.path.basename(command[2]))
    os.makedirs(keep_dir, exist_ok=True)
    env_lines, stages, why = _dryrun(command, keep_dir, cwd)
    if stages is None:
        return plain(why)
    plan, why = _plan(stages)
    if plan is None:
        return plain(why)
    host_chain, device_chain, final = plan
    cicc_at = next(i for i, s in enumerate(device_chain) if "--module_id_file_name" in s)
    cicc_line = device_chain[cicc_at]
    parts = shlex.split(cicc_line)
    fe_id = parts[parts.index("--module_id_file_name") + 1]
    own_id = os.path.join(keep_dir, "device.module_id")
    parallel_device = list(device_chain)
    parallel_device[cicc_at] = _own_module_id(cicc_line, own_id)
    env = _environment(env_lines)
    with ThreadPoolExecutor(2) as pool:
        host = pool.submit(_run_script, host_chain, env, cwd)
        device = pool.submit(_run_script, parallel_device, env, cwd)
        (host_rc, host_out), (device_rc, device_out) = host.result(), device.result()
    output = host_out + device_out
    if host_rc != 0:
        return host_rc, host_out, round(time.monotonic() - started, 3), "parallel front ends"
    mode = "parallel front ends"
    if device_rc == 0 and _read(fe_id) != _read(own_id):
        # Never seen, but the host stubs and device code must agree on the id: redo the device
        # chain the way nvcc would, reading cudafe++'s id.
        device_rc, device_out = _run_script(device_chain, env, cwd)
        output = host_out + device_out
        mode = "parallel front ends (device chain re-run: module ids differed)"
    if device_rc != 0:
        return device_rc, output, round(time.monotonic() - started, 3), mode
    final_rc, final_out = _run_script([final], env, cwd)
    return final_rc, output + final_out, round(time.monotonic() - started, 3), mode


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None

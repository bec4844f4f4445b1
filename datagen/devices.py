"""The devices the project measures on, as only the TVM runtime sees them: how records name
a device (`device_description`, `host_cpu_model`), loading a device backend where `import
tvm` loaded none (`load_device_runtime`), and compiling CUDA kernels with NVRTC through a
cache (`NvrtcCompiler`, `use_kernel_cache`).

Like `datagen.batch_measure`, the device host's script, it needs only the TVM runtime, numpy
and for CUDA NVRTC (`TVM_USE_RUNTIME_LIB=1`) and imports nothing else of this project, so the
builders, the runner and `collect` use the same code that measures on a host without TVM's
compiler.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys

from datagen.errors import atomic_path

CUDA_COMPILE_CALLBACK = "tvm_callback_cuda_compile"


def device_description(dev, kind: str, remote: bool = False) -> dict:
    """The device as records name it: model, compute capability, the CUDA driver API version
    (`driver`, e.g. 13000 for CUDA 13.0: what the installed driver supports; TVM's runtime does
    not report it), the CUDA version the TVM runtime was built with (`api`, as it reports it),
    and for NVIDIA GPUs the kernel driver's version. `remote`: `dev` is a device of an RPC
    session, so what only its host says (the CPU's model, the driver's versions) is left out."""
    if kind == "cpu":
        return {"kind": "cpu"} if remote else {"kind": "cpu", "model": host_cpu_model()}
    out = {"kind": kind, "model": dev.device_name, "compute": dev.compute_version,
           "driver": dev.driver_version, "api": dev.api_version}
    if kind == "cuda" and not remote:
        out["driver"] = out["driver"] or cuda_driver_version()
        out["nvidia_driver"] = nvidia_driver_version()
    return out


def cuda_driver_version() -> int | None:
    """The CUDA driver API version of this host's driver (libcuda's `cuDriverGetVersion`,
    which needs no device context), None where there is no CUDA driver."""
    import ctypes

    try:
        version = ctypes.c_int(0)
        if ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return version.value or None


def nvidia_driver_version() -> str:
    """The NVIDIA kernel driver's version (e.g. "580.82.07"), "" where it cannot be read.
    The runtime's `driver_version` is the CUDA driver API version, not this."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as handle:
            words = handle.readline().split()
    except OSError:
        return ""
    return next((w for w in words if w[:1].isdigit() and "." in w), "")


def host_cpu_model() -> str:
    """The marketing name of the host CPU from /proc/cpuinfo, else the platform string."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cache_kernel_compiles(cache_dir: str, compile_fn) -> callable:
    """A CUDA compile callback that returns a kernel compiled before (same source) from
    `cache_dir`, and otherwise compiles it with `compile_fn` and stores it (atomically, so
    parallel compilers may share the folder)."""
    os.makedirs(cache_dir, exist_ok=True)

    def compile_cached(code: str):
        path = os.path.join(cache_dir, hashlib.sha1(code.encode()).hexdigest() + ".bin")
        if os.path.isfile(path):
            with open(path, "rb") as handle:
                return bytearray(handle.read())
        binary = bytes(compile_fn(code))
        with atomic_path(path, ".bin") as tmp, open(tmp, "wb") as handle:
            handle.write(binary)
        return bytearray(binary)
    return compile_cached


DEVICE_RUNTIMES = {"cuda": "tvm_runtime_cuda"}  # libraries of TVM's device backends, by kind


def load_device_runtime(kind: str) -> None:
    """Load the TVM runtime library of `kind`'s devices (libtvm_runtime_cuda for CUDA), which
    registers their device API and module loaders. `import tvm` does so only with the full
    install: with the runtime alone (`TVM_USE_RUNTIME_LIB=1`) it loads no device backend, and a
    GPU would look absent. Raises OSError where the library does not load (no CUDA driver)."""
    from pathlib import Path

    from tvm.base import _LOADED_LIBS
    from tvm_ffi.libinfo import load_lib_ctypes

    name = DEVICE_RUNTIMES.get(kind)
    if name is None or name in _LOADED_LIBS:
        return
    runtime_dir = Path(_LOADED_LIBS["tvm_runtime"]._name).resolve().parent
    try:
        _LOADED_LIBS[name] = load_lib_ctypes(package="tvm", target_name=name,
                                             extra_lib_paths=[runtime_dir], mode="RTLD_LOCAL")
    except RuntimeError as err:  # tvm_ffi's "cannot find the library"
        raise OSError(str(err)) from None


def cuda_arch(target: dict, dev) -> str:
    """The architecture to compile a batch's kernels for: its target's ("sm_90a" for
    nvidia/nvidia-h100), else the device's, spelled as TVM does ("a" from compute 9.0 on)."""
    if target.get("arch"):
        return str(target["arch"])
    major, minor = dev.compute_version.split(".")
    return f"sm_{major}{minor}" + ("a" if int(major) >= 9 else "")


# The standard headers that TVM's NVRTC preamble and its generated CUDA include, in the order
# they are first included there. Parsing them (libcu++'s type_traits above all) takes most of a
# small kernel's compilation, the same for every kernel.
NVRTC_STD_HEADERS = ("cuda/std/cstdint", "cuda/std/limits", "cuda/std/type_traits")
NVRTC_PREINCLUDE = "tvm_costmodel_nvrtc_std.h"


class NvrtcCompiler:
    """A CUDA compile function that is `tvm.support.nvcc.compile_cuda` with NVRTC (cubin), as
    TVM's own callback, but parses the standard headers once per process: they are included
    first, from one header (`--pre-include`), which NVRTC's automatic precompiled header
    (`--pch`, NVRTC 12.8 on) keeps in memory for the next kernels. In TVM's order, so the cubin
    is byte for byte TVM's own. Where NVRTC refuses that (an older NVRTC) but compiles the
    kernel without it, this process goes on without (`pch` turns False), saying so on stderr.

    `arch` None: the current target's, as TVM's callback does."""

    def __init__(self, arch: str | None, include_dir: str):
        header = os.path.join(include_dir, NVRTC_PREINCLUDE)
        if not os.path.isfile(header):
            os.makedirs(include_dir, exist_ok=True)
            with atomic_path(header, ".h") as tmp, open(tmp, "w", encoding="utf-8") as handle:
                handle.writelines(f"#include <{name}>\n" for name in NVRTC_STD_HEADERS)
        self.arch = arch
        self.pch = True
        self.pch_options = [f"-I{include_dir}", f"--pre-include={NVRTC_PREINCLUDE}", "--pch"]

    def __call__(self, code: str):
        from tvm.support import nvcc

        if self.pch:
            try:
                return nvcc.compile_cuda(code, target_format="cubin", arch=self.arch,
                                         compiler="nvrtc", options=self.pch_options)
            except Exception as err:  # noqa: BLE001  (the kernel's own error is raised below)
                binary = nvcc.compile_cuda(code, target_format="cubin", arch=self.arch,
                                           compiler="nvrtc")
                self.pch = False  # compiled without: NVRTC cannot precompile here
                refused = (str(err).strip().splitlines() or [""])[-1][:200]
                print(f"NVRTC refused the precompiled standard headers ({refused}): process "
                      f"{os.getpid()} compiles its kernels without them", file=sys.stderr)
                return binary
        return nvcc.compile_cuda(code, target_format="cubin", arch=self.arch, compiler="nvrtc")

    def warm_up(self) -> None:
        """Precompile the standard headers now, by compiling an empty kernel with the options
        every kernel gets, so that this process's first real kernel finds them ready (a process
        that starts before it has kernels to compile: the builders). Any error is left for the
        first real kernel to report."""
        try:
            self(WARM_UP_KERNEL)
        except Exception:  # noqa: BLE001
            pass


WARM_UP_KERNEL = 'extern "C" __global__ void tvm_costmodel_warm_up() {}\n'


def use_kernel_cache(cache_dir: str, arch: str | None = None, warm_up: bool = False) -> None:
    """Route TVM's CUDA compilation (the NVRTC callback of `tvm.support.nvcc`) through the
    cache, compiling with `NvrtcCompiler`. Also the initializer of the compiling workers.

    `arch` is required with the runtime alone: the callback otherwise asks TVM's compiler
    library for the current target (`Target.current`), which the runtime does not have, and
    every kernel fails to load. `TVM_CUDA_COMPILE_MODE` (nvrtc, nvcc) is honoured as by TVM:
    with nvcc, TVM's own compilation. `warm_up`: precompile NVRTC's headers now
    (`NvrtcCompiler.warm_up`), for a process that has time before its first kernel."""
    import tvm  # noqa: F401
    from tvm.support import nvcc  # registers the NVRTC callback
    import tvm_ffi

    mode = os.environ.get("TVM_CUDA_COMPILE_MODE", "nvrtc").lower()
    if mode == "nvrtc":
        compile_fn = NvrtcCompiler(arch, os.path.join(cache_dir, "include"))
        if warm_up:
            compile_fn.warm_up()
    elif arch is None:
        compile_fn = tvm_ffi.get_global_func(CUDA_COMPILE_CALLBACK)
    else:
        def compile_fn(code: str):
            return nvcc.compile_cuda(code, target_format="fatbin", arch=arch, compiler=mode)
    tvm_ffi.register_global_func(CUDA_COMPILE_CALLBACK,
                                 cache_kernel_compiles(cache_dir, compile_fn), override=True)

"""`tilelang.rocm.target.check_hip_availability()`, which CUDA programs call to pick a warp
size: Tegula targets NVIDIA GPUs only, so HIP is never available."""


def check_hip_availability() -> bool:
    """False: Tegula compiles for CUDA only (a warp is 32 threads)."""
    return False

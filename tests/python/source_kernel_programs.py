"""T.CUDASourceCodeKernel programs: prim_funcs whose kernels are CUDA written by hand,
alone or after a kernel written in the language. Shared by
tests/python/cpu/test_source_kernel.py and tests/python/gpu/test_source_kernel_gpu.py."""
import tegula.language as T

AXPBY = """
extern "C" __global__ void __launch_bounds__(128) axpby(const float* x, float* y, float a, int n) {
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) {
        y[i] = a * x[i] + 2.0f * y[i];
    }
}
"""

# Two kernels in one source; the entry is the second. Its arguments are the prim_func's,
# every tensor's pointer (X, X2, S) then the two T.dynamic sizes (rows, cols).
ROW_SUM = """
__device__ float twice(float v) { return 2.0f * v; }

extern "C" __global__ void unused_kernel(float* out) { out[0] = 0.0f; }

extern "C" __global__ void row_sum(const float* X, const float* X2, float* S, int rows, int cols) {
    int r = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (r < rows) {
        float acc = 0.0f;
        for (int c = 0; c < cols; ++c) acc += X2[r * cols + c];
        S[r] = twice(acc);
    }
}
"""


def axpby(source=AXPBY, entry="axpby", threads=128):
    """y = a x + 2 y over a dynamic n: the pointers, the scalar, then n."""
    n = T.dynamic("n")

    @T.prim_func
    def main(x: T.Tensor((n,), T.float32), y: T.Tensor((n,), T.float32), a: T.float32):
        T.CUDASourceCodeKernel(T.ceildiv(n, threads), threads=threads, source_code_or_path=source,
                               entry_name=entry)

    return main


def scaled_row_sum():
    """X2 = 3 X in the language, then S[r] = 2 * sum(X2[r, :]) in CUDA: two kernels of one
    prim_func, launched in order on one argument list."""
    rows, cols = T.dynamic("rows, cols")

    @T.prim_func
    def main(X: T.Tensor((rows, cols), T.float32), X2: T.Tensor((rows, cols), T.float32),
             S: T.Tensor((rows,), T.float32)):
        with T.Kernel(rows, threads=32) as r:
            for c in T.serial(cols):
                X2[r, c] = X[r, c] * 3.0
        T.CUDASourceCodeKernel(T.ceildiv(rows, 64), threads=64, source_code_or_path=ROW_SUM, entry_name="row_sum")

    return main

"""What the attention kernels share: one key block of the online softmax, as a T.macro.

Given the scores of a key block in acc_s (rows x cols, float32, already masked), it folds
their row maxima into scores_max, rescales the output accumulator and the running
denominator by exp2((old max - new max) * scale), and leaves the probabilities
P = exp2(S * scale - max * scale) in acc_s_cast, ready for `T.gemm(acc_s_cast, V, acc_o)`.
`scale` carries log2(e), so exp2 is exp. The maxima are subtracted before scaling: equal
maxima (a row that has seen no key yet, still at its -1e30 start) must give exactly 1,
which `m_prev * scale - m * scale` would not once compiled to a fused multiply-add.
"""
import tegula.language as T


@T.macro
def online_softmax(acc_s, acc_s_cast, acc_o, scores_max, scores_max_prev, scores_scale, scores_sum, logsum,
                   scale, rows, cols, dim):
    T.copy(scores_max, scores_max_prev)
    T.reduce_max(acc_s, scores_max, dim=1, clear=False)
    for i in T.Parallel(rows):
        scores_scale[i] = T.exp2((scores_max_prev[i] - scores_max[i]) * scale)
    for i, j in T.Parallel(rows, dim):
        acc_o[i, j] *= scores_scale[i]
    for i, j in T.Parallel(rows, cols):
        acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
    T.reduce_sum(acc_s, scores_sum, dim=1)
    for i in T.Parallel(rows):
        logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
    T.copy(acc_s, acc_s_cast)

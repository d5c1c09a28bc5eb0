"""The 4-bit codes of the W4A16 programs (dequant_gemm.py) inside a kernel: where a
decode chunk's k index finds its code in the packed bytes (`k_slot`, `k_column`,
`group_column`) and how a code's bits become a 16-bit weight (`magic_value`, `code_bits`,
`pair_bits`, `decode_half`, `weight_value`). Every function here is traced into a
T.prim_func; none runs on its own.

The dequantization is integer and bit work, no int-to-float conversion: a code n is put
into the mantissa of a 16-bit float whose exponent makes the ulp 1 (0x6400 = 1024 in fp16,
0x4300 = 128 in bf16), giving base + n exactly (a signed code has bit 3 flipped on the way,
making it n + 8); subtracting base + 8 (or base + z) gives the integer weight exactly, and
one multiply by the scale rounds it once. That is a shift, one three-input logic op (mask
and XOR, with the magic word a launch argument so that the compiler keeps it in a register,
see `magic_value`), and, two weights at a time, a half2 subtract and multiply. An e2m1
code's three magnitude bits, shifted to bits 11..9 of an fp16 (8..6 of a bf16) with the
sign at bit 15, are the fp4 value times 2^-14 (2^-126), its subnormal e = 0 included, so
fp4 costs shifts, an exact multiply by that power of two and the scale's multiply, which
rounds once (the scale converted to x's dtype: an fp8 e4m3 scale exactly; an e8m0 one
must lie within the dtype's range, which bf16's always does). The decode program reads
its k steps in the order `k_slot` gives (both operands, so the product is the same),
which makes a thread's packed bytes contiguous and puts a register's two codes 16 bits
apart in one word.
"""
import tegula.language as T

# A 16-bit float whose ulp is 1: OR-ing a 4-bit code into its mantissa adds the code exactly.
MAGIC = {"float16": (0x6400, 1024.0), "bfloat16": (0x4300, 128.0)}
# An e2m1 code's magnitude bits placed at bits 11..9 of an fp16 (FP4_BITS) are its value
# times 2^-14; at bits 8..6 of a bf16, times 2^-126 (FP4_SHIFT), subnormal codes included.
FP4_BITS = {"float16": 9, "bfloat16": 6}
FP4_SHIFT = {"float16": 14, "bfloat16": 126}


def k_slot(j, block_K):
    """Where the tensor cores' k index j of a decode chunk of block_K columns reads its
    weight: (w, p, e), the packed 32-bit word w of the chunk's row, the nibble pair p of
    it (nibbles p and p + 4, bits 4 p and 4 p + 16) and e which of the two, standing for K
    column 8 w + p + 4 e of the chunk (`k_column`). Both operands are read in this order,
    so the product is unchanged.

    Why this order: in mma m16n8k16's A layout (wgmma's, with A in registers, is the same
    per warp) lane l holds, of each 16 k, the pairs (2 q, 2 q + 1) and (2 q + 8, 2 q + 9),
    q = l % 4, each pair one 32-bit register of two 16-bit weights. Pair r = 2 c + h of
    lane q (j = 16 c + 8 h + 2 q + e) takes word q (block_K / 32) + r // 4, nibbles
    r % 4 and r % 4 + 4: a lane's weights of a row are block_K / 32 consecutive words (16
    bytes for block_K = 128, one shared load), and the two codes of a register lie 16
    bits apart, so that one mask-and-XOR of the word shifted by 4 (r % 4) builds both
    16-bit weights of the register at once (`pair_bits`; the engine stores the two halves
    of one 32-bit value into neighbouring registers as that value). Worked example,
    block_K = 128: lane q = 1 reads bytes 16..31 of the row's chunk; its k indices
    j = 2, 3 are columns 32, 36 (word 4, nibbles 0 and 4), j = 10, 11 columns 33, 37,
    j = 18, 19 columns 34, 38. X, the other operand, is gathered into the same order a
    16-bit element at a time."""
    c, r = j // 16, j % 16
    q, h, e = (r % 8) // 2, r // 8, r % 2
    p = 2 * c + h
    return q * (block_K // 32) + p // 4, p % 4, e


def k_column(j, block_K):
    w, p, e = k_slot(j, block_K)
    return 8 * w + p + 4 * e


def group_column(column, block_K, group_size):
    """A column of a decode chunk that lies in the same scale group as `column`: the first
    of its lane's block_K / 4 columns when groups are whole multiples of that span, so that a
    lane's weights share one scale expression (one load, one conversion) for the compiler."""
    span = block_K // 4
    return column // span * span if group_size % span == 0 else column


def magic_value(weight_format, has_zeros, dtype):
    """The programs' `Magic` argument: what code_bits XORs into a code, the
    exponent that makes the 16-bit float's ulp 1 (and for signed codes the flip of bit 3
    that turns a two's complement nibble into its value + 8). It is passed at launch rather
    than written as a constant so that the compiler keeps it in a register and fuses the
    mask and the XOR into one three-input logic instruction (LOP3) instead of two."""
    if weight_format == "fp4":
        return 0
    return MAGIC[dtype][0] | (0 if has_zeros else 8)


def code_bits(x, weight_format, magic, dtype):
    """The 16-bit float (as a uint32) that the code in the low nibble of x decodes to before
    the scale: for int4, base + the code (base + 8 + the signed code without zeros); for
    fp4, the e2m1 value times 2^-FP4_SHIFT[dtype] as `dtype` bits (the three magnitude
    bits at the bottom of the exponent, the sign bit at the top). magic: magic_value's, at
    run time."""
    if weight_format == "fp4":
        return T.shift_left(x & 7, FP4_BITS[dtype]) | T.shift_left(x & 8, 12)
    return (x & 15) ^ magic


def pair_bits(x, weight_format, magic, dtype):
    """code_bits of the codes in nibbles 0 and 4 of x at once: the first code's 16-bit
    float in bits 0..15, the second's in bits 16..31 (k_slot puts a register's two codes
    there). One mask and XOR (int4) or two masks, shifts and an OR (fp4) for two weights."""
    if weight_format == "fp4":
        return T.shift_left(x & T.uint32(0x00070007), FP4_BITS[dtype]) | T.shift_left(x & T.uint32(0x00080008), 12)
    return (x & T.uint32(0x000F000F)) ^ (magic | T.shift_left(magic, 16))


def decode_half(bits, s, z, weight_format, kind, has_zeros, dtype):
    """code_bits' value as the weight, scaled (and shifted by the zero)."""
    return weight_value(T.reinterpret(T.cast(bits, "uint16"), dtype), s, z, weight_format, kind, has_zeros, dtype)


def weight_value(h, s, z, weight_format, kind, has_zeros, dtype):
    """The weight whose code_bits, reinterpreted as `dtype`, are h: scaled (and shifted by
    the zero)."""
    if weight_format == "fp4":
        # (value * 2^-shift) * 2^shift is exact; the multiply by the scale rounds once.
        return (h * T.cast(2.0 ** FP4_SHIFT[dtype], dtype)) * T.cast(s, dtype)
    base = MAGIC[dtype][1]
    offset = T.cast(T.cast(z, "float32") + base, dtype) if has_zeros else T.cast(base + 8.0, dtype)
    if kind == "unscaled":          # the integer weight alone (exact), scaled after the mma
        return h - offset
    if kind == "dtype":
        return (h - offset) * s
    return T.cast(T.cast(h - offset, "float32") * s, dtype)

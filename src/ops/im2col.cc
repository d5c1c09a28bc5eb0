// T.im2col(img, col, nhw_step, c_step, kernel, stride, dilation, pad): the tile of a 2-D
// convolution's lowered input a block multiplies (implicit GEMM). img is NHWC; col is a
// (block_M, block_K) tile of the (N*OH*OW) x (KH*KW*C) matrix whose row r is the output
// pixel (n, oh, ow) and whose column q is the filter tap (kh, kw, c), in the order of a
// (KH, KW, C, F) filter read as (KH*KW*C, F). The tile starts at row nhw_step * block_M
// and column c_step * block_K; taps outside the image (padding) and rows or columns past
// the matrix read 0. It expands into a T.Parallel nest:
//
//   col[m, q] = img[n, oh*S + kh*D - P, ow*S + kw*D - P, c]   (or 0 outside)
#include "ops/region.h"
#include "ops/tile_op.h"

namespace tegula::ops {
namespace {

using namespace ir;

class Im2col : public TileOp {
 public:
  Stmt expand(const TileOpNode* op, Kernel&, transform::PassContext&) const override {
    const SourceLoc& loc = op->loc;
    user_assert(op->regions.size() == 2 && op->args.size() == 2, loc)
        << "T.im2col takes an image, a tile and the tile's row and column steps";
    const Buffer& img = op->regions[0].buffer;
    const Buffer& col = op->regions[1].buffer;
    user_assert(img->shape.size() == 4 && col->shape.size() == 2, loc)
        << "T.im2col: the image must be 4-D (N, H, W, C) and the tile 2-D, got " << img->shape.size() << "-D '"
        << img->name << "' and " << col->shape.size() << "-D '" << col->name << "'";
    int64_t K = op->attr_int("kernel", 1), S = op->attr_int("stride", 1), D = op->attr_int("dilation", 1),
            P = op->attr_int("pad", 0);
    Expr N = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    Expr OH = floordiv(H + make_int(2 * P - D * (K - 1) - 1), make_int(S)) + 1;
    Expr OW = floordiv(W + make_int(2 * P - D * (K - 1) - 1), make_int(S)) + 1;
    Expr rows = N * OH * OW, taps = C * (K * K);
    return make_parallel_nest(
        col->shape,
        [&](const std::vector<Expr>& v) {
          Expr r = op->args[0] * col->shape[0] + v[0];
          Expr q = op->args[1] * col->shape[1] + v[1];
          Expr n = floordiv(r, OH * OW), oh = floormod(floordiv(r, OW), OH), ow = floormod(r, OW);
          Expr kh = floordiv(q, C * K), kw = floormod(floordiv(q, C), make_int(K)), c = floormod(q, C);
          Expr h = oh * S + kh * D + make_int(-P), w = ow * S + kw * D + make_int(-P);
          Expr inside = r < rows && q < taps && make_binary(BinaryOp::GE, h, make_int(0)) && h < H &&
                        make_binary(BinaryOp::GE, w, make_int(0)) && w < W;
          Stmt load = make_store(col, v, make_cast(col->dtype, make_load(img, {n, h, w, c}, loc)), loc);
          Stmt zero = make_store(col, v, make_cast(col->dtype, make_int(0)), loc);
          return make_if(inside, load, zero, loc);
        },
        loc);
  }
};

}  // namespace

const TileOp* im2col_op() {
  static Im2col op;
  return &op;
}

}  // namespace tegula::ops

#include <sstream>

#include "ops/tile_op.h"

namespace tegula::ops {
namespace {

using namespace ir;

// The `table` attr of a T.Fragment annotation (python/tegula/layout.py, Fragment.encode):
// per element in row-major order, "thread:slot" copies joined by ",", elements by " ".
layout::Owners parse_table(const std::string& text, const SourceLoc& loc) {
  layout::Owners owners;
  std::istringstream elements(text);
  std::string element;
  while (elements >> element) {
    owners.emplace_back();
    std::istringstream copies(element);
    std::string copy;
    while (std::getline(copies, copy, ',')) {
      size_t colon = copy.find(':');
      internal_assert(colon != std::string::npos) << "T.Fragment table entry '" << copy << "' at " << loc.str();
      owners.back().push_back({std::stoi(copy.substr(0, colon)), std::stoi(copy.substr(colon + 1))});
    }
  }
  return owners;
}

// T.annotate_layout / T.use_swizzle: read by the passes that use them; nothing to emit.
// A T.Fragment annotation fixes its fragment's layout at the strict level of layout
// inference, before anything is derived from neighbours; an op that needs another layout
// for the buffer (a gemm accumulator) is a layout conflict, reported wherever it is met.
class Annotation : public TileOp {
 public:
  bool infer_layout(const TileOpNode* op, InferLevel level, transform::PassContext& ctx,
                    const Kernel& k) const override {
    if (level != InferLevel::Strict || op->op != "annotate_layout" || op->attr_str("layout", "") != "fragment") {
      return false;
    }
    const Buffer& b = op->regions.at(0).buffer;
    user_assert(b->scope == Scope::Fragment, op->loc)
        << "T.annotate_layout: T.Fragment lays out a fragment; '" << b->name << "' is " << scope_name(b->scope);
    auto want = layout::make_table(const_shape(b, op->loc, "T.alloc_fragment"), k.threads,
                                   parse_table(op->attr_str("table", ""), op->loc), op->loc);
    transform::LayoutMap& layouts = ctx.layouts;
    auto have = layouts.fragment.find(b.get());
    if (have != layouts.fragment.end()) {
      user_assert(have->second->same_as(*want), op->loc)
          << "layout conflict: T.annotate_layout gives '" << b->name << "' the layout " << want->describe()
          << ", but it already has " << have->second->describe() << " (decided at line "
          << layouts.decided_at[b.get()].line << ")";
      return false;
    }
    layouts.fragment[b.get()] = want;
    layouts.decided_at[b.get()] = op->loc;
    return true;
  }
  Stmt lower(const TileOpNode*, transform::PassContext&, const Kernel&) const override { return {}; }
};

}  // namespace

const TileOp* annotation_op() {
  static Annotation op;
  return &op;
}

}  // namespace tegula::ops

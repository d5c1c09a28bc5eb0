// The signature of an entry point's call, which selects its entry plan (entry_plans.cc):
// what a plan's recording may depend on, as words to hash and compare.
#pragma once
#include <Python.h>
#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <cstring>
#include <string>
#include <vector>

namespace tegula::bindings::signature {

// The signature as words (tags, sizes, values) and the strings among its values.
struct Key {
  c10::SmallVector<int64_t, 48> words;
  std::vector<std::string> strings;
  bool operator==(const Key& o) const {
    return words.size() == o.words.size() &&
           std::memcmp(words.data(), o.words.data(), words.size() * sizeof(int64_t)) == 0 && strings == o.strings;
  }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t w : k.words) h = (h ^ uint64_t(w)) * 1099511628211ull;
    for (const auto& s : k.strings) h = (h ^ std::hash<std::string>{}(s)) * 1099511628211ull;
    return size_t(h);
  }
};

// The tensors of a call, in the order the signature met them (positional arguments, then
// keywords, each tuple's items in place).
struct Inputs {
  c10::SmallVector<PyObject*, 8> objects;
  c10::SmallVector<const at::Tensor*, 8> tensors;
};

// The key of entry(*args, **kwargs) (kwargs may be null), and the call's tensors; false
// for a call no plan covers: a value of another type, a tensor subclass, a meta or traced
// tensor, one that requires grad while grad mode is on, an int past 64 bits.
bool make_key(PyObject* args, PyObject* kwargs, Key& key, Inputs& in);

}  // namespace tegula::bindings::signature

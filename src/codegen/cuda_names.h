// The names a kernel's variables, buffers and entry point take in the generated CUDA C++.
//
// A user's name reaches the source only through legal_name, so that a buffer called `do`,
// a loop variable called `threadIdx` or a tensor called `tegula_smem` still compiles:
//
//   legal_name("acc")          -> "acc"
//   legal_name("do")           -> "do_"          a C++ keyword
//   legal_name("threadIdx")    -> "threadIdx_"   a CUDA built-in the kernel reads
//   legal_name("cast")         -> "cast_"        a device-library name the printed code calls
//   legal_name("tegula_smem")  -> "v_tegula_smem" the prefix of the printer's own names
//   legal_name("__x")          -> "v__x"         reserved to the implementation
//   legal_name("2d")           -> "v_2d"
//   legal_name("α")            -> "u3b1"         only ASCII identifiers are printed
//
// The result is a fixed function of the name, so a program always prints the same source;
// making it distinct from the kernel's other names is the printer's (CudaPrinter::unique).
#pragma once
#include <string>

namespace tegula::codegen {

// Whether `name` may not be declared in a kernel body: a C++ or CUDA keyword, a name the
// CUDA headers or the device library (kernels/include/tegula) declare or define as a
// macro, a name of the printer's own (tegula_*), or an identifier reserved to the
// implementation (a leading `__`, or `_` and a capital letter).
bool is_reserved_name(const std::string& name);

// `name` as a legal identifier that is not reserved (examples above).
std::string legal_name(const std::string& name);

}  // namespace tegula::codegen

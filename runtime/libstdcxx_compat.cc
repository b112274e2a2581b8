// Linked into the portable (wheel) builds only (Makefile: PORTABLE=1).
//
// TensorFlow's Linux wheel is manylinux_2_27: its libraries need nothing newer
// than the libstdc++ of GCC 7-8 (GLIBCXX_3.4.22 / CXXABI_1.3.11 and below). The
// op library is compiled here by a newer g++, whose headers call a few libstdc++
// functions that only newer releases export. Defined here with hidden
// visibility, they bind inside the library, so the wheel needs no newer
// libstdc++ than TensorFlow's own: what the manylinux toolchains'
// libstdc++_nonshared.a does. tools/check/wheel_check.py fails on any symbol
// version above the wheel's policy, so a new one shows up there.
//
// No libstdc++ header declares these names here, so the hidden definitions do
// not clash with the default-visibility declarations in <bits/functexcept.h>.
#include <pthread.h>

#include <new>
#include <sstream>

#define MO_HIDDEN __attribute__((visibility("hidden")))

// std::__throw_bad_array_new_length() (GLIBCXX_3.4.29, GCC 11): called by
// std::allocator<T>::allocate when n * sizeof(T) overflows.
extern "C" MO_HIDDEN __attribute__((noreturn)) void mo_throw_bad_array_new_length()
    __asm__("_ZSt28__throw_bad_array_new_lengthv");
extern "C" void mo_throw_bad_array_new_length() { throw std::bad_array_new_length(); }

// std::ostringstream's default constructor (GLIBCXX_3.4.26, GCC 9: before, the
// header defaulted the mode argument of the one-argument constructor).
template std::ostringstream::basic_ostringstream();
template std::stringstream::basic_stringstream();

// exp(double) (GLIBC_2.29: glibc 2.29 made the new, faster exp the default
// version; the older entry point, GLIBC_2.2.5, is the same function behind
// the old error-handling wrapper). Calls from the library bind to this
// hidden definition, which calls the old version: the wheel then needs no
// glibc newer than TensorFlow's (2.27).
extern "C" double mo_glibc_exp_2_2_5(double);
__asm__(".symver mo_glibc_exp_2_2_5, exp@GLIBC_2.2.5");
extern "C" MO_HIDDEN double mo_exp(double x) __asm__("exp");
extern "C" double mo_exp(double x) { return mo_glibc_exp_2_2_5(x); }

// dlsym (GLIBC_2.34: glibc 2.34 moved libdl into libc under new symbol
// versions; the older entry point, GLIBC_2.2.5, is the same function). The Metal
// plan executor looks up the shim executor with it (kernels/metal_plan/executor.cc).
extern "C" void* mo_glibc_dlsym_2_2_5(void*, const char*);
__asm__(".symver mo_glibc_dlsym_2_2_5, dlsym@GLIBC_2.2.5");
extern "C" MO_HIDDEN void* mo_dlsym(void* handle, const char* name) __asm__("dlsym");
extern "C" void* mo_dlsym(void* handle, const char* name) { return mo_glibc_dlsym_2_2_5(handle, name); }

// pthread_once (GLIBC_2.34: moved from libpthread into libc under a new
// version; the older entry point, GLIBC_2.2.5, is the same function).
// std::call_once calls it (the XLA registration, kernels/xla/register_xla.cc).
extern "C" int mo_glibc_pthread_once_2_2_5(pthread_once_t*, void (*)());
__asm__(".symver mo_glibc_pthread_once_2_2_5, pthread_once@GLIBC_2.2.5");
extern "C" MO_HIDDEN int mo_pthread_once(pthread_once_t* once, void (*init)()) __asm__("pthread_once");
extern "C" int mo_pthread_once(pthread_once_t* once, void (*init)()) { return mo_glibc_pthread_once_2_2_5(once, init); }

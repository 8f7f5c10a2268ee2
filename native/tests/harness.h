// The harness of every C++ test driver in native/tests: counted checks that print what failed, a
// registry of named cases, and a main that runs them and prints "N passed, N failed" last (exit 1 on
// any failure; triton_fastpath.native.toolchain.DriverRun reads that line).
//
//   FASTPATH_TEST(TestParsesNumbers) { current = "numbers"; Check(..., "what was expected"); }
//   FASTPATH_TEST_GROUP("redis", TestL2Refusals) { ... }   // run by RunCases("redis") only
//
// A driver without arguments of its own takes the main here (`driver [--list] [--case NAME]`); one
// with its own arguments defines FASTPATH_TEST_CUSTOM_MAIN before including this and ends its main
// with `RunCases(...)` and `return Summary();`. Checks may run on any thread; `current` is set on
// the main thread (by RunCases to each case's name, and by a case to narrow it).
#pragma once

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace fastpath_test {

inline std::atomic<int> passed{0};
inline std::atomic<int> failed{0};
inline std::string current;  // what is being checked: named in each failure

// Counts `condition`; prints "FAILED <current>: <what>" when it is false. Allocates nothing (a
// driver may be failing allocations on purpose).
inline void Check(bool condition, const std::string& what) {
  if (condition) {
    ++passed;
  } else {
    ++failed;
    std::printf("FAILED %s: %s\n", current.c_str(), what.c_str());
  }
}

inline bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// An error message that says what it should.
inline void CheckError(const std::string& error, const std::string& part) {
  Check(Contains(error, part), "expected an error containing '" + part + "', got '" + error + "'");
}

#define FASTPATH_CHECK_STRINGIFY2(x) #x
#define FASTPATH_CHECK_STRINGIFY(x) FASTPATH_CHECK_STRINGIFY2(x)
// Check(condition) described by its own text and place.
#define FASTPATH_CHECK(condition) \
  ::fastpath_test::Check((condition), #condition " (" __FILE__ ":" FASTPATH_CHECK_STRINGIFY(__LINE__) ")")

struct Case {
  const char* group;
  const char* name;
  void (*run)();
};

inline std::vector<Case>& Cases() {
  static std::vector<Case> cases;
  return cases;
}

struct Registration {
  Registration(const char* group, const char* name, void (*run)()) { Cases().push_back({group, name, run}); }
};

#define FASTPATH_TEST_GROUP(group, name)                                                      \
  void name();                                                                                \
  static const ::fastpath_test::Registration name##_registration((group), #name, &(name)); \
  void name()
#define FASTPATH_TEST(name) FASTPATH_TEST_GROUP("", name)

// Runs the cases of `group` in the order they are defined (within a file), or only the one named
// `only`; returns how many ran.
inline int RunCases(const char* group = "", const char* only = nullptr) {
  int ran = 0;
  for (const Case& c : Cases()) {
    if (std::strcmp(c.group, group) != 0 || (only != nullptr && std::strcmp(c.name, only) != 0)) continue;
    current = c.name;
    c.run();
    ++ran;
  }
  return ran;
}

// Prints "N passed, N failed"; the driver's exit code (0 when nothing failed).
inline int Summary() {
  std::printf("%d passed, %d failed\n", passed.load(), failed.load());
  std::fflush(stdout);
  return failed == 0 ? 0 : 1;
}

// `driver` runs every case of the default group; `--case NAME` one; `--list` names them.
inline int Main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--list") == 0) {
    for (const Case& c : Cases()) std::printf("%s%s%s\n", c.group, *c.group ? " " : "", c.name);
    return 0;
  }
  const char* only = nullptr;
  if (argc == 3 && std::strcmp(argv[1], "--case") == 0) {
    only = argv[2];
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: %s [--list | --case NAME]\n", argv[0]);
    return 2;
  }
  if (RunCases("", only) == 0 && only != nullptr) {
    std::fprintf(stderr, "no case named %s (--list names them)\n", only);
    return 2;
  }
  return Summary();
}

}  // namespace fastpath_test

#ifndef FASTPATH_TEST_CUSTOM_MAIN
int main(int argc, char** argv) { return ::fastpath_test::Main(argc, argv); }
#endif

// The shared util's file helpers (the owned descriptor and the whole-file write) and its NVML loader.
#include "util/file.hpp"
#include "util/nvml.hpp"
#include "util/unique_fd.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace {

using gpuguard::detail::unique_fd;
namespace fs = std::filesystem;

bool is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1 || errno != EBADF; }

int open_null() {
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  return fd;
}

// A fresh directory under the test's temporary directory, removed at the end.
struct temp_dir {
  fs::path path;
  temp_dir() {
    std::string pattern = (fs::temp_directory_path() / "gpuguard-util-XXXXXX").string();
    path = ::mkdtemp(pattern.data()) != nullptr ? fs::path(pattern) : fs::path();
  }
  ~temp_dir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
};

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(unique_fd, closes_its_descriptor_when_it_goes_out_of_scope) {
  int raw = -1;
  {
    const unique_fd fd(open_null());
    raw = fd.get();
    ASSERT_TRUE(fd.valid());
    EXPECT_TRUE(is_open(raw));
  }
  EXPECT_FALSE(is_open(raw));
}

TEST(unique_fd, a_move_hands_the_descriptor_on_and_assignment_closes_the_one_it_held) {
  unique_fd first(open_null());
  const int raw = first.get();
  unique_fd second(std::move(first));
  EXPECT_EQ(first.get(), -1);  // NOLINT(bugprone-use-after-move): a moved-from owner holds nothing
  EXPECT_EQ(second.get(), raw);
  EXPECT_TRUE(is_open(raw));

  unique_fd third(open_null());
  const int replaced = third.get();
  third = std::move(second);
  EXPECT_FALSE(is_open(replaced));
  EXPECT_EQ(third.get(), raw);
  EXPECT_TRUE(is_open(raw));
}

TEST(unique_fd, close_says_whether_it_closed_and_leaves_nothing_to_close_twice) {
  unique_fd fd(open_null());
  const int raw = fd.get();
  EXPECT_TRUE(fd.close());
  EXPECT_FALSE(fd.valid());
  EXPECT_FALSE(is_open(raw));
  EXPECT_TRUE(fd.close());  // nothing owned: nothing to fail
  fd.reset(open_null());
  EXPECT_TRUE(fd.valid());
}

TEST(write_file_atomically, writes_the_whole_text_and_leaves_no_temporary_file) {
  const temp_dir dir;
  ASSERT_FALSE(dir.path.empty());
  const fs::path target = dir.path / "metrics.prom";
  const std::string text(100000, 'x');
  std::string error;
  ASSERT_TRUE(gpuguard::detail::write_file_atomically(target.string(), text, &error)) << error;
  EXPECT_EQ(slurp(target), text);
  ASSERT_TRUE(gpuguard::detail::write_file_atomically(target.string(), "second\n", &error)) << error;
  EXPECT_EQ(slurp(target), "second\n");
  int entries = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path)) { ++entries; }
  EXPECT_EQ(entries, 1);
}

TEST(write_file_atomically, a_missing_directory_is_an_error_naming_the_file_and_writes_nothing) {
  const temp_dir dir;
  ASSERT_FALSE(dir.path.empty());
  const fs::path target = dir.path / "no-such-dir" / "out.json";
  std::string error;
  EXPECT_FALSE(gpuguard::detail::write_file_atomically(target.string(), "{}", &error));
  EXPECT_NE(error.find("'" + target.string() + ".tmp.XXXXXX'"), std::string::npos) << error;
  EXPECT_NE(error.find("No such file or directory"), std::string::npos) << error;
  EXPECT_TRUE(fs::is_empty(dir.path));
}

// The process's umask for the scope, restored after.
struct scoped_umask {
  mode_t saved;
  explicit scoped_umask(mode_t mask) : saved(::umask(mask)) {}
  ~scoped_umask() { ::umask(saved); }
  scoped_umask(const scoped_umask&) = delete;
  scoped_umask& operator=(const scoped_umask&) = delete;
};

mode_t mode_of(const fs::path& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode;
}

TEST(write_file_atomically, replaces_a_link_at_the_target_and_never_writes_through_it) {
  const temp_dir dir;
  ASSERT_FALSE(dir.path.empty());
  const fs::path victim = dir.path / "victim";
  std::ofstream(victim) << "untouched\n";
  const fs::path target = dir.path / "out.json";
  fs::create_symlink(victim, target);
  std::string error;
  ASSERT_TRUE(gpuguard::detail::write_file_atomically(target.string(), "{}\n", &error)) << error;
  EXPECT_EQ(slurp(victim), "untouched\n");
  EXPECT_FALSE(fs::is_symlink(target));
  EXPECT_EQ(slurp(target), "{}\n");
}

TEST(write_file_atomically, gives_the_documented_mode_less_the_umask) {
  const temp_dir dir;
  ASSERT_FALSE(dir.path.empty());
  for (const mode_t mask : {mode_t{022}, mode_t{027}, mode_t{077}}) {
    const scoped_umask umask(mask);
    const fs::path target = dir.path / ("mode-" + std::to_string(mask));
    std::string error;
    ASSERT_TRUE(gpuguard::detail::write_file_atomically(target.string(), "x", &error)) << error;
    EXPECT_EQ(mode_of(target) & 07777, 0644 & ~mask) << "umask " << std::oct << mask;
  }
}

TEST(write_file_atomically, a_directory_at_the_target_is_an_error_and_leaves_no_temporary_file) {
  const temp_dir dir;
  ASSERT_FALSE(dir.path.empty());
  const fs::path target = dir.path / "taken";
  fs::create_directory(target);
  std::string error;
  EXPECT_FALSE(gpuguard::detail::write_file_atomically(target.string(), "x", &error));
  EXPECT_NE(error.find(target.string()), std::string::npos) << error;
  EXPECT_NE(gpuguard::detail::publish_problem(target.string()).find("is a directory"), std::string::npos);
  EXPECT_EQ(gpuguard::detail::publish_problem((dir.path / "free").string()), "");
  int entries = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path)) { ++entries; }
  EXPECT_EQ(entries, 1);
}

using gpuguard::detail::existing_file;
using gpuguard::detail::open_output_file;

// Writes `text` through open_output_file; the error when it refused.
std::string write_through(const fs::path& path, existing_file existing, const std::string& text) {
  std::string error;
  const unique_fd fd(open_output_file(path.string(), existing, &error));
  if (!fd.valid()) { return error; }
  EXPECT_TRUE(gpuguard::detail::write_all(fd.get(), text.data(), text.size()));
  return "";
}

TEST(open_output_file, creates_with_the_documented_mode_then_truncates_or_appends) {
  const temp_dir dir;
  ASSERT_FALSE(dir.path.empty());
  const scoped_umask umask(027);
  const fs::path path = dir.path / "events.jsonl";
  EXPECT_EQ(write_through(path, existing_file::truncate, "first\n"), "");
  EXPECT_EQ(mode_of(path) & 07777, mode_t{0640});
  EXPECT_EQ(write_through(path, existing_file::append, "second\n"), "");
  EXPECT_EQ(slurp(path), "first\nsecond\n");
  EXPECT_EQ(write_through(path, existing_file::truncate, "third\n"), "");
  EXPECT_EQ(slurp(path), "third\n");
}

TEST(open_output_file, errors_name_the_path) {
  const temp_dir dir;
  ASSERT_FALSE(dir.path.empty());
  for (const fs::path& bad : {dir.path / "no-such-dir" / "x", dir.path, dir.path / ""}) {
    const std::string error = write_through(bad, existing_file::truncate, "x");
    EXPECT_NE(error.find("'" + bad.string() + "'"), std::string::npos) << error;
  }
}

TEST(open_output_file, follows_a_link_where_no_other_user_could_have_planted_it) {
  const temp_dir dir;
  ASSERT_FALSE(dir.path.empty());
  const fs::path real = dir.path / "real.log";
  std::ofstream(real) << "old\n";
  fs::create_symlink(real, dir.path / "link.log");
  EXPECT_EQ(write_through(dir.path / "link.log", existing_file::truncate, "new\n"), "");
  EXPECT_EQ(slurp(real), "new\n");
  // In a sticky, world-writable directory too, when this user owns the link.
  fs::permissions(dir.path, static_cast<fs::perms>(01777));
  EXPECT_EQ(write_through(dir.path / "link.log", existing_file::append, "more\n"), "");
  EXPECT_EQ(slurp(real), "new\nmore\n");
}

// Another user's link needs root to make (lchown); the planting by a real other user is in
// symlink_attack_test.py.
TEST(open_output_file, refuses_another_users_link_in_a_sticky_world_writable_directory) {
  if (::geteuid() != 0) { GTEST_SKIP() << "giving a link to another user needs root"; }
  const temp_dir dir;
  ASSERT_FALSE(dir.path.empty());
  const fs::path victim = dir.path / "victim";
  std::ofstream(victim) << "untouched\n";
  const fs::path shared = dir.path / "shared";
  fs::create_directory(shared);
  fs::permissions(shared, static_cast<fs::perms>(01777));
  const fs::path link = shared / "crash.txt";
  fs::create_symlink(victim, link);
  constexpr uid_t other = 65534;
  ASSERT_EQ(::lchown(link.c_str(), other, other), 0);
  for (const existing_file existing : {existing_file::truncate, existing_file::append}) {
    const std::string error = write_through(link, existing, "overwritten\n");
    EXPECT_NE(error.find("refusing to follow the symbolic link '" + link.string() + "'"), std::string::npos) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
  EXPECT_EQ(slurp(victim), "untouched\n");
  // Without the sticky bit, or when that user owns the directory, the kernel's rule follows it.
  ASSERT_EQ(::chown(shared.c_str(), other, other), 0);
  EXPECT_EQ(write_through(link, existing_file::truncate, "followed\n"), "");
  EXPECT_EQ(slurp(victim), "followed\n");
  ASSERT_EQ(::chown(shared.c_str(), 0, 0), 0);
  fs::permissions(shared, static_cast<fs::perms>(0777));
  EXPECT_EQ(write_through(link, existing_file::truncate, "again\n"), "");
  EXPECT_EQ(slurp(victim), "again\n");
}

// As fs.protected_regular=1: a file another user made in /tmp is theirs to read and rewrite.
TEST(open_output_file, refuses_another_users_regular_file_in_a_sticky_world_writable_directory) {
  if (::geteuid() != 0) { GTEST_SKIP() << "giving a file to another user needs root"; }
  const temp_dir dir;
  ASSERT_FALSE(dir.path.empty());
  const fs::path shared = dir.path / "shared";
  fs::create_directory(shared);
  fs::permissions(shared, static_cast<fs::perms>(01777));
  const fs::path planted = shared / "events.jsonl";
  std::ofstream(planted) << "planted\n";
  constexpr uid_t other = 65534;
  ASSERT_EQ(::chown(planted.c_str(), other, other), 0);
  const std::string error = write_through(planted, existing_file::truncate, "mine\n");
  EXPECT_NE(error.find("refusing to open '" + planted.string() + "': uid 65534 owns it"), std::string::npos) << error;
  EXPECT_EQ(slurp(planted), "planted\n");
  // Its owner's own directory: as the kernel, trusted.
  ASSERT_EQ(::chown(shared.c_str(), other, other), 0);
  EXPECT_EQ(write_through(planted, existing_file::truncate, "mine\n"), "");
  EXPECT_EQ(slurp(planted), "mine\n");
}

TEST(open_output_file, refuses_a_hard_linked_file_in_a_sticky_world_writable_directory_before_truncating) {
  const temp_dir dir;
  ASSERT_FALSE(dir.path.empty());
  const fs::path victim = dir.path / "victim";
  std::ofstream(victim) << "untouched\n";
  const fs::path shared = dir.path / "shared";
  fs::create_directory(shared);
  fs::permissions(shared, static_cast<fs::perms>(01777));
  fs::create_hard_link(victim, shared / "events.jsonl");
  const std::string error = write_through(shared / "events.jsonl", existing_file::truncate, "x");
  EXPECT_NE(error.find("refusing to open '" + (shared / "events.jsonl").string() + "'"), std::string::npos) << error;
  EXPECT_EQ(slurp(victim), "untouched\n");
}

TEST(write_all, writes_every_byte_through_a_pipe_and_reports_a_closed_reader) {
  int fds[2] = {-1, -1};
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  unique_fd read_end(fds[0]);
  unique_fd write_end(fds[1]);
  const std::string text(4000, 'y');  // under the pipe's capacity: no reader needed
  ASSERT_TRUE(gpuguard::detail::write_all(write_end.get(), text.data(), text.size()));
  std::string got(text.size(), '\0');
  std::size_t done = 0;
  while (done < got.size()) {
    const ssize_t n = ::read(read_end.get(), got.data() + done, got.size() - done);
    ASSERT_GT(n, 0);
    done += static_cast<std::size_t>(n);
  }
  EXPECT_EQ(got, text);
  read_end.reset();
  struct sigaction ignore{};
  struct sigaction before{};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGPIPE, &ignore, &before), 0);
  errno = 0;
  EXPECT_FALSE(gpuguard::detail::write_all(write_end.get(), "z", 1));
  EXPECT_EQ(errno, EPIPE);
  ::sigaction(SIGPIPE, &before, nullptr);
}

// NVML is loaded on first use, and a machine without it (or a GPU it does not know) only loses its
// answers: no handle, no figures, and "cannot say" where a caller must not assume. With NVML, a bus
// id that names no GPU gets no handle either.
TEST(nvml, a_missing_library_or_unknown_gpu_gets_no_handle_and_no_figures) {
  EXPECT_EQ(gpuguard::util::nvml_device(nullptr), nullptr);
  EXPECT_EQ(gpuguard::util::nvml_device("not a bus id"), nullptr);
  std::uint64_t used = 7;
  std::uint64_t total = 9;
  EXPECT_FALSE(gpuguard::util::nvml_memory(nullptr, used, total));
  EXPECT_EQ(used, 7U);  // left as they were
  EXPECT_EQ(total, 9U);
  EXPECT_TRUE(gpuguard::util::nvml_mig_enabled(nullptr));  // cannot say: the caller keeps cudaMemGetInfo
  EXPECT_EQ(gpuguard::util::nvml_process_used(nullptr, static_cast<int>(::getpid())), -1);
}

}  // namespace

#include "util/file.hpp"

#include "util/unique_fd.hpp"

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gpuguard::detail {

namespace {

std::string reason(int error_number) {
  return error_number != 0 ? std::strerror(error_number) : "nothing written";
}

// The process's umask, read from /proc/self/status: umask(2) can only read it by setting it, which
// races with other threads creating files. 022 where the kernel does not say.
mode_t process_umask() {
  constexpr mode_t fallback = 022;
  const unique_fd fd(::open("/proc/self/status", O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) { return fallback; }
  std::array<char, 8192> text{};
  std::size_t size = 0;
  while (size < text.size() - 1) {
    const ssize_t n = ::read(fd.get(), text.data() + size, text.size() - 1 - size);
    if (n < 0 && errno == EINTR) { continue; }
    if (n <= 0) { break; }
    size += static_cast<std::size_t>(n);
  }
  const char* line = std::strstr(text.data(), "\nUmask:");
  if (line == nullptr) { return fallback; }
  char* end = nullptr;
  const unsigned long mask = std::strtoul(line + std::strlen("\nUmask:"), &end, 8);
  return end == line + std::strlen("\nUmask:") ? fallback : static_cast<mode_t>(mask & 0777);
}

// `path`'s directory and last component ("." for a bare name; "/" for a name in the root).
struct path_parts {
  std::string directory;
  std::string name;
};

path_parts split(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) { return {".", path}; }
  return {slash == 0 ? std::string("/") : path.substr(0, slash), path.substr(slash + 1)};
}

bool sticky_and_world_writable(const struct stat& directory) {
  return (directory.st_mode & S_ISVTX) != 0 && (directory.st_mode & S_IWOTH) != 0;
}

// The one-line refusal, or "" where protected_symlinks would follow the link `link` in `directory`.
std::string link_refusal(const std::string& path, const struct stat& link, const struct stat& directory) {
  const uid_t me = ::geteuid();
  if (!sticky_and_world_writable(directory) || link.st_uid == me || link.st_uid == directory.st_uid) { return {}; }
  return "refusing to follow the symbolic link '" + path + "': uid " + std::to_string(link.st_uid) +
         " owns it, neither this process's user (uid " + std::to_string(me) +
         ") nor the owner of its sticky, world-writable directory (uid " + std::to_string(directory.st_uid) + ")";
}

}  // namespace

bool write_all(int fd, const void* data, std::size_t size) noexcept {
  const auto* bytes = static_cast<const char*>(data);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, bytes + done, size - done);
    if (n < 0 && errno == EINTR) { continue; }
    if (n <= 0) {
      if (n == 0) { errno = 0; }
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

bool write_file_atomically(const std::string& path, std::string_view data, std::string* error) {
  // mkostemp creates the name with O_CREAT|O_EXCL (never through a link) and mode 0600; its six
  // random characters make the name unpredictable, and a name taken is tried again with others.
  const std::string pattern = path + ".tmp.XXXXXX";
  std::string temp = pattern;
  unique_fd fd(::mkostemp(temp.data(), O_CLOEXEC));
  if (!fd.valid()) {
    if (error != nullptr) { *error = "cannot create '" + pattern + "': " + reason(errno); }
    return false;
  }
  const auto fail = [&](const std::string& what) {
    const int saved = errno;
    fd.reset();
    ::unlink(temp.c_str());
    if (error != nullptr) { *error = what + ": " + reason(saved); }
    return false;
  };
  if (!write_all(fd.get(), data.data(), data.size())) { return fail("cannot write '" + temp + "'"); }
  if (::fchmod(fd.get(), output_file_mode & ~process_umask()) != 0) { return fail("cannot set the mode of '" + temp + "'"); }
  if (!fd.close()) { return fail("cannot close '" + temp + "'"); }
  // rename replaces whatever is at `path`, a symbolic link included, and never writes through it.
  if (std::rename(temp.c_str(), path.c_str()) != 0) { return fail("cannot rename '" + temp + "' to '" + path + "'"); }
  return true;
}

std::string publish_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) { return "'" + path + "' is a directory"; }
  const std::string pattern = path + ".tmp.XXXXXX";
  std::string temp = pattern;
  const int fd = ::mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) { return "cannot create '" + pattern + "': " + std::strerror(errno); }
  ::close(fd);
  ::unlink(temp.c_str());
  return {};
}

int open_output_file(const std::string& path, existing_file existing, std::string* error) {
  const auto fail = [&](const std::string& what) {
    if (error != nullptr) { *error = what; }
    return -1;
  };
  const auto cannot = [&](int error_number) { return fail("cannot open '" + path + "': " + std::strerror(error_number)); };
  const path_parts parts = split(path);
  if (parts.name.empty() || parts.name == "." || parts.name == "..") { return cannot(EISDIR); }
  // Everything below is relative to the directory opened once, so the checks and the open see the
  // same directory even if a component of its path is swapped meanwhile.
  const unique_fd directory(::open(parts.directory.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!directory.valid()) { return cannot(errno); }
  struct stat dir_stat {};
  if (::fstat(directory.get(), &dir_stat) != 0) { return cannot(errno); }
  const char* name = parts.name.c_str();
  const int append = existing == existing_file::append ? O_APPEND : 0;

  // A name removed or replaced between two steps sends the loop round again; a few rounds suffice
  // unless someone keeps swapping it, which ends in an error.
  for (int round = 0; round < 16; ++round) {
    // A new file: O_EXCL never follows a link, and creates with the documented mode.
    int fd = ::openat(directory.get(), name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | append,
                      output_file_mode);
    if (fd >= 0) { return fd; }
    if (errno != EEXIST) { return cannot(errno); }

    // An existing file, not through a link (ELOOP when the last component is one).
    fd = ::openat(directory.get(), name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC | append);
    if (fd >= 0) {
      const auto refuse = [&](const std::string& what) {
        ::close(fd);
        return fail(what);
      };
      struct stat file_stat {};
      if (::fstat(fd, &file_stat) != 0) { return refuse("cannot open '" + path + "': " + std::strerror(errno)); }
      if (S_ISREG(file_stat.st_mode) && sticky_and_world_writable(dir_stat)) {
        if (file_stat.st_nlink > 1) {
          return refuse("refusing to open '" + path + "': it has " + std::to_string(file_stat.st_nlink) +
                        " hard links in a sticky, world-writable directory, so it may be another file's");
        }
        // As fs.protected_regular=1: a file someone else made there could be read or rewritten by
        // them while this process writes it.
        const uid_t me = ::geteuid();
        if (file_stat.st_uid != me && file_stat.st_uid != dir_stat.st_uid) {
          return refuse("refusing to open '" + path + "': uid " + std::to_string(file_stat.st_uid) +
                        " owns it, neither this process's user (uid " + std::to_string(me) +
                        ") nor the owner of its sticky, world-writable directory (uid " +
                        std::to_string(dir_stat.st_uid) + ")");
        }
      }
      // Truncated only now, after the checks: O_TRUNC would have emptied a refused file.
      if (existing == existing_file::truncate && S_ISREG(file_stat.st_mode) && ::ftruncate(fd, 0) != 0) {
        return refuse("cannot truncate '" + path + "': " + std::strerror(errno));
      }
      return fd;
    }
    if (errno == ENOENT) { continue; }
    if (errno != ELOOP) { return cannot(errno); }

    // A symbolic link: followed only where protected_symlinks=1 would follow it.
    struct stat link_stat {};
    if (::fstatat(directory.get(), name, &link_stat, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) { continue; }
      return cannot(errno);
    }
    if (!S_ISLNK(link_stat.st_mode)) { continue; }
    if (const std::string refusal = link_refusal(path, link_stat, dir_stat); !refusal.empty()) { return fail(refusal); }
    // In a sticky directory only the link's owner, the directory's owner or root can replace this
    // link, and those are the users trusted above; elsewhere those who can write the directory are
    // trusted, as the kernel trusts them.
    fd = ::openat(directory.get(), name, O_WRONLY | O_CREAT | O_CLOEXEC | append |
                                             (existing == existing_file::truncate ? O_TRUNC : 0),
                  output_file_mode);
    if (fd >= 0) { return fd; }
    return cannot(errno);
  }
  return fail("cannot open '" + path + "': it was replaced again and again while being opened");
}

}  // namespace gpuguard::detail

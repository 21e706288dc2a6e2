#include "util/file.hpp"

#include "util/unique_fd.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

namespace gpuguard::detail {

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
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  const auto fail = [&](const std::string& what) {
    if (error != nullptr) { *error = what + ": " + (errno != 0 ? std::strerror(errno) : "nothing written"); }
    ::unlink(temp.c_str());
    return false;
  };
  unique_fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) {
    if (error != nullptr) { *error = "cannot create '" + temp + "': " + std::strerror(errno); }
    return false;
  }
  if (!write_all(fd.get(), data.data(), data.size())) {
    const int saved = errno;
    fd.reset();
    errno = saved;
    return fail("cannot write '" + temp + "'");
  }
  if (!fd.close()) { return fail("cannot close '" + temp + "'"); }
  if (std::rename(temp.c_str(), path.c_str()) != 0) { return fail("cannot rename '" + temp + "' to '" + path + "'"); }
  return true;
}

}  // namespace gpuguard::detail

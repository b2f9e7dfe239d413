// The file walk behind the self-test store's key (fastfake/core/selftest_store.py):
// the listing tests/test_selftest_store.py's reference walk in Python gives, without
// a Python object per directory entry.
#include "common/file_listing.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <utility>

namespace fastfake {

namespace {

bool ends_with_any(const std::string& name, const std::vector<std::string>& suffixes) {
  for (const auto& s : suffixes) {
    if (name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      return true;
    }
  }
  return false;
}

int64_t mtime_ns(const struct stat& st) {
#if defined(__APPLE__)
  return int64_t(st.st_mtimespec.tv_sec) * 1000000000 + st.st_mtimespec.tv_nsec;
#else
  return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
#endif
}

std::string join(const std::string& dir, const std::string& name) {
  if (!dir.empty() && dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

} // namespace

std::string file_listing(
    const std::string& root,
    const std::vector<std::string>& suffixes,
    const std::vector<std::string>& skip_dirs) {
  std::string out;
  std::vector<std::string> stack{root};
  while (!stack.empty()) {
    std::string d = std::move(stack.back());
    stack.pop_back();
    DIR* dir = opendir(d.c_str());
    if (dir == nullptr) {
      out += "!" + d + ":OSError\n";
      continue;
    }
    // (entries are stat'ed relative to the open directory: one path component
    // resolved per file, not the whole path)
    const int dfd = dirfd(dir);
    // (name, is a directory not reached through a symbolic link)
    std::vector<std::pair<std::string, unsigned char>> entries;
    while (struct dirent* e = readdir(dir)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      entries.emplace_back(std::move(name), e->d_type);
    }
    std::sort(entries.begin(), entries.end());
    std::vector<std::string> dirs;
    for (auto& [name, type] : entries) {
      std::string path = join(d, name);
      bool is_dir = type == DT_DIR;
      if (type == DT_UNKNOWN) {
        struct stat lst;
        if (fstatat(dfd, name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) != 0) {
          out += "!" + path + ":OSError\n";
          continue;
        }
        is_dir = S_ISDIR(lst.st_mode);
      }
      if (is_dir) {
        if (std::find(skip_dirs.begin(), skip_dirs.end(), name) == skip_dirs.end()) {
          dirs.push_back(std::move(path));
        }
      } else if (ends_with_any(name, suffixes)) {
        struct stat st;
        if (fstatat(dfd, name.c_str(), &st, 0) != 0) {
          out += "!" + path + ":OSError\n";
          continue;
        }
        out += path;
        out += '\0';
        out += std::to_string(static_cast<long long>(st.st_size));
        out += '\0';
        out += std::to_string(static_cast<long long>(mtime_ns(st)));
        out += '\n';
      }
    }
    closedir(dir);
    for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) stack.push_back(std::move(*it));
  }
  return out;
}

} // namespace fastfake

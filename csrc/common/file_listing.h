// The file listing the self-test store's key is made of (csrc/common/file_listing.cpp,
// fastfake/core/selftest_store.py).
#pragma once

#include <string>
#include <vector>

namespace fastfake {

// "path\0size\0mtime_ns\n" for every file under `root` whose name ends with one
// of `suffixes` (stat follows a symbolic link), directories depth first with
// each directory's entries in name order, its files before its subdirectories;
// subdirectories named in `skip_dirs` and symbolic links to directories are not
// entered; an entry or directory that cannot be read gives "!path:OSError\n".
std::string file_listing(
    const std::string& root,
    const std::vector<std::string>& suffixes,
    const std::vector<std::string>& skip_dirs);

} // namespace fastfake

// The one door for crash-safe checkpoint file operations: a save writes into a temporary
// directory, fsyncs it and renames it into place, so a crash never leaves a half-written tag.
//
// A save:  dir = make_temp_dir(root, tag, nonce); write files into dir; publish_dir(dir, root/tag);
//          atomic_write_file(root/"latest", tag).
// After a crash, list_temp_dirs(root) names the leftovers of unfinished saves for remove_tree.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <zero/checkpoint/errors.h>

namespace zero::ckpt {

// A name that is safe as one path component inside a checkpoint directory: non-empty, at most
// 255 bytes, no '/', '\\' or NUL, not "." or "..", and no ".." anywhere in it.
bool is_safe_component(std::string_view name);

// "<pid>-<16 random hex digits>": a safe component, unique enough for temporary names.
std::string unique_nonce();

// Creates parent (and its parents) if missing, then the new directory parent/<tag>.tmp-<nonce>,
// and returns its path. tag and nonce must be safe components; the directory must not exist.
std::string make_temp_dir(const std::string& parent, const std::string& tag,
                          const std::string& nonce);

// Creates path and its parents when missing (CheckpointError naming path otherwise).
void make_dirs(const std::string& path);

// Renames the complete, fsynced file temp over path and fsyncs path's directory; on error temp
// is removed and the old file at path is left intact.
void rename_into_place(const std::string& temp, const std::string& path);

// fsyncs a file or a directory (a directory on a filesystem that cannot sync one is accepted).
void fsync_path(const std::string& path);

// fsyncs every file and directory under temp_dir and temp_dir itself, then renames temp_dir to
// final_dir and fsyncs final_dir's parent. An existing final_dir (a re-save of the same tag) is
// first renamed to final_dir.old-<nonce> and removed once the new one is in place; if the
// second rename fails, the old directory is put back before the error is thrown.
void publish_dir(const std::string& temp_dir, const std::string& final_dir);

// Replaces path's contents atomically: writes path.tmp-<nonce>, fsyncs, renames it over path and
// fsyncs the parent. On error the temporary file is removed and the old file is left intact.
void atomic_write_file(const std::string& path, std::string_view contents);

// The contents of a regular file of at most max_bytes bytes; missing, larger or unreadable files
// are CheckpointErrors.
std::string read_small_file(const std::string& path, size_t max_bytes);

// Removes a file or directory tree; symbolic links are removed, never followed. A missing path
// is not an error.
void remove_tree(const std::string& path);

// The entries of parent whose names contain ".tmp-" (temporary directories and files of saves
// that did not finish), as full paths in sorted order; empty when parent does not exist.
// ".old-" directories are not listed: after a crash during publish_dir one may hold the only copy.
std::vector<std::string> list_temp_dirs(const std::string& parent);

}  // namespace zero::ckpt

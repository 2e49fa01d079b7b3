// A bump allocator of stable chunks (the machine's lanes and the simplifier's list items).
#pragma once
#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

namespace ndvm {

// A bump allocator of stable chunks; reset() keeps the chunks for the next run.
class Arena {
 public:
  struct Mark {
    size_t chunk, pos;
  };
  void* alloc(size_t n) {
    n = (n + 15) & ~size_t(15);
    while (cur_ < chunks_.size()) {
      if (pos_ + n <= sizes_[cur_]) {
        void* p = chunks_[cur_].get() + pos_;
        pos_ += n;
        return p;
      }
      ++cur_;
      pos_ = 0;
    }
    size_t sz = std::max<size_t>(size_t(1) << 16, n);
    chunks_.emplace_back(new char[sz]);
    sizes_.push_back(sz);
    bytes_ += sz;
    cur_ = chunks_.size() - 1;
    pos_ = n;
    return chunks_.back().get();
  }
  void reset() { cur_ = pos_ = 0; }
  Mark mark() const { return {cur_, pos_}; }
  void restore(Mark m) {
    cur_ = m.chunk;
    pos_ = m.pos;
  }
  size_t bytes() const { return bytes_; }

 private:
  std::vector<std::unique_ptr<char[]>> chunks_;
  std::vector<size_t> sizes_;
  size_t cur_ = 0, pos_ = 0, bytes_ = 0;
};

}  // namespace ndvm

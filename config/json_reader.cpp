// A recursive-descent reader for lenient JSON (comments, trailing commas, BOM, CRLF) that
// records the line of every key and rejects duplicate keys, invalid UTF-8 and anything else.
#include "json_reader.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <limits>

#include <zero/config/config.h>

namespace zero::detail {

std::string join_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

namespace {

class Reader {
 public:
  Reader(std::string_view text, const std::string& source) : text_(text), source_(source) {}

  JsonDocument read() {
    if (text_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;
    skip_space("");
    if (at_end()) fail("", "the file is empty (expected a JSON object)");
    doc_.value = parse_value("", 0);
    skip_space("");
    if (!at_end()) {
      fail("",
           "unexpected text after the end of the JSON document (the config must be one JSON "
           "object: is its opening '{' missing?)");
    }
    return std::move(doc_);
  }

 private:
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }
  int column() const { return static_cast<int>(pos_ - line_start_) + 1; }

  [[noreturn]] void fail(const std::string& path, const std::string& message) {
    fail_at(line_, column(), path, message);
  }
  [[noreturn]] void fail_at(int line, int col, const std::string& path,
                            const std::string& message) {
    ConfigDiagnostic d;
    d.file = source_;
    d.line = line;
    d.column = col;
    d.path = path.empty() ? "(root)" : path;
    d.message = "syntax error at column " + std::to_string(d.column) + ": " + message;
    throw ConfigFileError({d});
  }

  void newline() {
    ++line_;
    line_start_ = pos_ + 1;
  }

  // Whitespace, // line comments and /* block */ comments.
  void skip_space(const std::string& path) {
    while (!at_end()) {
      char c = text_[pos_];
      if (c == '\n') {
        newline();
        ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++pos_;
      } else if (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '/') {
        while (!at_end() && text_[pos_] != '\n') ++pos_;
      } else if (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '*') {
        int start_line = line_;
        pos_ += 2;
        while (true) {
          if (at_end()) {
            fail(path,
                 "unterminated /* comment (opened on line " + std::to_string(start_line) + ")");
          }
          if (text_[pos_] == '*' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '/') {
            pos_ += 2;
            break;
          }
          if (text_[pos_] == '\n') newline();
          ++pos_;
        }
      } else {
        return;
      }
    }
  }

  static std::string describe(char c) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x21 && u < 0x7f) return std::string("'") + c + "'";
    char buf[16];
    std::snprintf(buf, sizeof buf, "byte 0x%02X", u);
    return buf;
  }

  static bool is_word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.' || c == '+';
  }

  nlohmann::json parse_value(const std::string& path, int depth) {
    if (depth > kMaxJsonDepth)
      fail(path, "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    if (at_end()) fail(path, "unexpected end of file (expected a value)");
    char c = peek();
    if (c == '{') return parse_object(path, depth);
    if (c == '[') return parse_array(path, depth);
    if (c == '"') return parse_string(path);
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(path);
    if (literal("true")) return true;
    if (literal("false")) return false;
    if (literal("null")) return nullptr;
    if (c == '\'') fail(path, "strings must use double quotes, not single quotes");
    if (is_word_char(c)) {
      size_t end = pos_;
      while (end < text_.size() && end - pos_ < 40 && is_word_char(text_[end])) ++end;
      fail(path, "unquoted value '" + std::string(text_.substr(pos_, end - pos_)) +
                     "' is not JSON (quote strings; fill in template placeholders before use)");
    }
    fail(path, "unexpected " + describe(c) + " (expected a value)");
  }

  bool literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    size_t end = pos_ + word.size();
    if (end < text_.size() && is_word_char(text_[end])) return false;
    pos_ = end;
    return true;
  }

  nlohmann::json parse_object(const std::string& path, int depth) {
    ++pos_;  // '{'
    nlohmann::json object = nlohmann::json::object();
    std::unordered_map<std::string, int> seen;
    while (true) {
      skip_space(path);
      if (at_end()) fail(path, "unexpected end of file inside an object (missing '}')");
      if (peek() == '}') {
        ++pos_;
        return object;
      }
      if (peek() != '"') {
        fail(path, "expected a quoted key or '}' but found " + describe(peek()) +
                       (peek() == ',' ? " (two commas in a row?)" : ""));
      }
      int key_line = line_;
      int key_column = column();
      std::string key = parse_string(path);
      std::string child = join_path(path, key);
      auto [it, inserted] = seen.emplace(key, key_line);
      if (!inserted) {
        fail_at(key_line, key_column, child,
                "duplicate key '" + key + "' (first given on line " + std::to_string(it->second) +
                    "); DeepSpeed rejects duplicate keys: keep one");
      }
      doc_.lines.emplace(child, key_line);
      skip_space(child);
      if (peek() != ':') {
        fail(child, "expected ':' after key \"" + key + "\" but found " +
                        (at_end() ? std::string("end of file") : describe(peek())));
      }
      ++pos_;
      skip_space(child);
      object[key] = parse_value(child, depth + 1);
      skip_space(path);
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') continue;
      if (at_end()) fail(path, "unexpected end of file inside an object (missing '}')");
      fail(path, "expected ',' or '}' after the value of \"" + key + "\" but found " +
                     describe(peek()) + " (missing comma?)");
    }
  }

  nlohmann::json parse_array(const std::string& path, int depth) {
    ++pos_;  // '['
    nlohmann::json array = nlohmann::json::array();
    while (true) {
      skip_space(path);
      if (at_end()) fail(path, "unexpected end of file inside an array (missing ']')");
      if (peek() == ']') {
        ++pos_;
        return array;
      }
      if (peek() == ',') fail(path, "unexpected ',' in an array (two commas in a row?)");
      std::string child = path + "[" + std::to_string(array.size()) + "]";
      doc_.lines.emplace(child, line_);
      array.push_back(parse_value(child, depth + 1));
      skip_space(path);
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']') continue;
      if (at_end()) fail(path, "unexpected end of file inside an array (missing ']')");
      fail(path,
           "expected ',' or ']' in an array but found " + describe(peek()) + " (missing comma?)");
    }
  }

  unsigned hex4(const std::string& path) {
    if (pos_ + 4 > text_.size()) fail(path, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      char h = text_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9')
        v |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f')
        v |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        v |= static_cast<unsigned>(h - 'A' + 10);
      else
        fail(path, "invalid hex digit in \\u escape");
    }
    return v;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // Copies one well-formed UTF-8 sequence starting at a byte >= 0x80, or fails.
  void copy_utf8(const std::string& path, std::string& out) {
    unsigned char b0 = static_cast<unsigned char>(text_[pos_]);
    int extra;
    unsigned cp, min_cp;
    if ((b0 & 0xE0) == 0xC0) {
      extra = 1;
      cp = b0 & 0x1F;
      min_cp = 0x80;
    } else if ((b0 & 0xF0) == 0xE0) {
      extra = 2;
      cp = b0 & 0x0F;
      min_cp = 0x800;
    } else if ((b0 & 0xF8) == 0xF0) {
      extra = 3;
      cp = b0 & 0x07;
      min_cp = 0x10000;
    } else
      fail(path, "invalid UTF-8 in a string");
    if (pos_ + static_cast<size_t>(extra) >= text_.size()) fail(path, "invalid UTF-8 in a string");
    for (int i = 1; i <= extra; ++i) {
      unsigned char b = static_cast<unsigned char>(text_[pos_ + i]);
      if ((b & 0xC0) != 0x80) fail(path, "invalid UTF-8 in a string");
      cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      fail(path, "invalid UTF-8 in a string");
    out.append(text_.substr(pos_, static_cast<size_t>(extra) + 1));
    pos_ += static_cast<size_t>(extra) + 1;
  }

  std::string parse_string(const std::string& path) {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (at_end()) fail(path, "unterminated string");
      char c = text_[pos_];
      unsigned char u = static_cast<unsigned char>(c);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (u < 0x20) {
        fail(path, c == '\n' ? "unterminated string (a string cannot span lines)"
                             : "control character " + describe(c) + " inside a string (escape it)");
      }
      if (u >= 0x80) {
        copy_utf8(path, out);
        continue;
      }
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      ++pos_;
      if (at_end()) fail(path, "unterminated string");
      char e = text_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned cp = hex4(path);
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail(path, "lone low surrogate in \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (text_.substr(pos_, 2) != "\\u")
              fail(path, "high surrogate without a low surrogate");
            pos_ += 2;
            unsigned lo = hex4(path);
            if (lo < 0xDC00 || lo > 0xDFFF) fail(path, "high surrogate without a low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default:
          --pos_;
          fail(path, "invalid escape \\" + std::string(1, e) + " in a string");
      }
    }
  }

  nlohmann::json parse_number(const std::string& path) {
    size_t start = pos_;
    auto digits = [&] {
      size_t n = 0;
      while (!at_end() && peek() >= '0' && peek() <= '9') ++pos_, ++n;
      return n;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
      if (peek() >= '0' && peek() <= '9') fail(path, "numbers cannot have leading zeros");
    } else if (digits() == 0) {
      fail(path, "a '-' must be followed by digits");
    }
    bool integral = true;
    if (peek() == '.') {
      integral = false;
      ++pos_;
      if (digits() == 0) fail(path, "a '.' in a number must be followed by digits");
    }
    if (peek() == 'e' || peek() == 'E') {
      integral = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (digits() == 0) fail(path, "an exponent must have digits");
    }
    if (!at_end() && is_word_char(peek()))
      fail(path, "unexpected " + describe(peek()) + " after a number");
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    if (integral) {
      int64_t i = 0;
      auto r = std::from_chars(first, last, i);
      if (r.ec == std::errc() && r.ptr == last) return i;
      uint64_t u = 0;
      r = std::from_chars(first, last, u);
      if (r.ec == std::errc() && r.ptr == last) return u;
    }
    double d = 0;
    auto r = std::from_chars(first, last, d);
    if (r.ec == std::errc::result_out_of_range) {
      fail(path,
           "number " + std::string(first, std::min<size_t>(last - first, 40)) + " is out of range");
    }
    if (r.ec != std::errc() || r.ptr != last) fail(path, "malformed number");
    return d;
  }

  std::string_view text_;
  const std::string& source_;
  size_t pos_ = 0;
  size_t line_start_ = 0;
  int line_ = 1;
  JsonDocument doc_;
};

}  // namespace

JsonDocument read_lenient_json(std::string_view text, const std::string& source_name) {
  return Reader(text, source_name).read();
}

}  // namespace zero::detail

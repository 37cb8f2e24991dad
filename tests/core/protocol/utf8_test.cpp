#include "common/utf8.hpp"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>

namespace keval {
namespace {

TEST(ValidUtf8, WellFormedTextIsUnchanged) {
  const std::string text = "plain ASCII, caf\xC3\xA9, \xE2\x82\xAC, \xF0\x9F\x98\x80";
  EXPECT_EQ(valid_utf8(text), text);
}

TEST(ValidUtf8, EveryMalformedByteBecomesOneReplacementCharacter) {
  EXPECT_EQ(valid_utf8("a\xFF"
                       "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(valid_utf8("\xC3"), "\xEF\xBF\xBD");                 // truncated sequence
  EXPECT_EQ(valid_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD"); // overlong '/'
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"); // surrogate
  EXPECT_EQ(valid_utf8("\xF4\x90\x80\x80").size(), 12u);                         // above U+10FFFF
}

TEST(ValidUtf8, AForgedFrameOnStdoutStillMakesValidJson) {
  std::string printed = "KEV1";
  printed += std::string("\0\0\0\xC8", 4); // a frame header: NUL bytes and a length byte
  printed += "{\"type\": \"done\"}";
  boost::json::object o;
  o["stdout"] = valid_utf8(printed);
  const auto parsed = boost::json::parse(boost::json::serialize(o));
  EXPECT_EQ(parsed.at("stdout").as_string().size(), printed.size() + 2); // one byte became three
}

} // namespace
} // namespace keval

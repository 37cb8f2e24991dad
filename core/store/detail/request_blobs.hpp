// Moving the large strings of a record's request into blobs, and putting them back.
//
// Why by content and per string, not the whole request compressed: the bytes that multiply are
// the same sources and tensor data submitted again and again (an RL loop grading variants
// against one reference, a benchmark re-run), inside requests that differ in a job id, a seed or
// num_trials. Per-string addressing stores each distinct source once, whatever wraps it; a
// compressed request would store it once per job (inline tensor data, already zlib, would not
// shrink at all). Strings under kMinBlobBytes stay inline: a blob costs a file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/value.hpp>

namespace keval::store::detail {

inline constexpr size_t kMinBlobBytes = 1024;

// Where a string was (object keys and array indices from the request's root), its digest and
// its size; as stored in the record's "request_blobs", which the record's MAC covers.
struct BlobRef {
  boost::json::array path;
  std::string sha256;
  uint64_t bytes = 0;
};

struct ExtractedBlob {
  BlobRef ref;
  std::string content;
};

// Replaces every string of at least kMinBlobBytes in `request` with null and returns them.
std::vector<ExtractedBlob> extract_blobs(boost::json::value& request);

boost::json::array refs_to_json(const std::vector<ExtractedBlob>& blobs);
// Parses "request_blobs"; throws std::runtime_error saying what is malformed.
std::vector<BlobRef> refs_from_json(const boost::json::value& refs);

// Puts `content` back where `ref` says; the place must hold null. Throws std::runtime_error.
void restore_blob(boost::json::value& request, const BlobRef& ref, std::string content);

// "request.kernel.source_code", for messages.
std::string describe(const BlobRef& ref);

} // namespace keval::store::detail

#include "store/detail/request_blobs.hpp"

#include "store/detail/blob_store.hpp"

#include <stdexcept>

#include <boost/json/serialize.hpp>

namespace keval::store::detail {

namespace json = boost::json;

namespace {

void walk(json::value& v, json::array& path, std::vector<ExtractedBlob>& out) {
  if (v.is_string()) {
    if (v.as_string().size() < kMinBlobBytes)
      return;
    ExtractedBlob blob;
    blob.content.assign(v.as_string().data(), v.as_string().size());
    blob.ref.path = path;
    blob.ref.sha256 = sha256_hex(blob.content);
    blob.ref.bytes = blob.content.size();
    out.push_back(std::move(blob));
    v = nullptr;
  } else if (v.is_object()) {
    for (auto& [key, child] : v.as_object()) {
      path.emplace_back(key);
      walk(child, path, out);
      path.pop_back();
    }
  } else if (v.is_array()) {
    auto& items = v.as_array();
    for (size_t i = 0; i < items.size(); ++i) {
      path.emplace_back(static_cast<int64_t>(i));
      walk(items[i], path, out);
      path.pop_back();
    }
  }
}

} // namespace

std::vector<ExtractedBlob> extract_blobs(json::value& request) {
  std::vector<ExtractedBlob> out;
  json::array path;
  walk(request, path, out);
  return out;
}

json::array refs_to_json(const std::vector<ExtractedBlob>& blobs) {
  json::array refs;
  for (const auto& blob : blobs)
    refs.push_back(json::object{
        {"path", blob.ref.path}, {"sha256", blob.ref.sha256}, {"bytes", blob.ref.bytes}});
  return refs;
}

std::vector<BlobRef> refs_from_json(const json::value& refs) {
  if (!refs.is_array())
    throw std::runtime_error("request_blobs is not an array");
  std::vector<BlobRef> out;
  for (const auto& item : refs.as_array()) {
    const auto* o = item.if_object();
    const json::value* path = o ? o->if_contains("path") : nullptr;
    const json::value* sha = o ? o->if_contains("sha256") : nullptr;
    const json::value* bytes = o ? o->if_contains("bytes") : nullptr;
    if (path == nullptr || !path->is_array() || sha == nullptr || !sha->is_string() ||
        !is_sha256_hex(sha->as_string()) || bytes == nullptr ||
        !(bytes->is_int64() || bytes->is_uint64()) || (bytes->is_int64() && bytes->as_int64() < 0))
      throw std::runtime_error("request_blobs entry " + json::serialize(item) + " is malformed");
    out.push_back(
        BlobRef{path->as_array(), std::string(sha->as_string()), bytes->to_number<uint64_t>()});
  }
  return out;
}

void restore_blob(json::value& request, const BlobRef& ref, std::string content) {
  json::value* place = &request;
  for (const auto& step : ref.path) {
    if (step.is_string() && place->is_object())
      place = place->as_object().if_contains(step.as_string());
    else if (step.is_int64() && place->is_array() && step.as_int64() >= 0)
      place = place->as_array().if_contains(static_cast<size_t>(step.as_int64()));
    else
      place = nullptr;
    if (place == nullptr)
      break;
  }
  if (place == nullptr || !place->is_null())
    throw std::runtime_error("request_blobs names " + describe(ref) +
                             ", which is not a place left for a blob in the request");
  *place = json::string(content);
}

std::string describe(const BlobRef& ref) {
  std::string text = "request";
  for (const auto& step : ref.path)
    text +=
        step.is_string() ? "." + std::string(step.as_string()) : "[" + json::serialize(step) + "]";
  return text;
}

} // namespace keval::store::detail

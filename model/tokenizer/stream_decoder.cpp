#include "model/tokenizer/stream_decoder.hpp"

#include "model/tokenizer/text.hpp"

namespace calserve::model {

stream_decoder::stream_decoder(std::shared_ptr<const tokenizer> tok) : tok_(std::move(tok)) {}

std::string stream_decoder::push(token_id id) {
    pending_ += tok_->token_bytes_view(id);
    // Everything before an unfinished trailing sequence decodes now; the decoder
    // is at a sequence boundary there, so splitting here cannot change the text.
    std::size_t keep = detail::incomplete_utf8_tail(pending_);
    std::string out;
    detail::append_utf8_lossy(out, std::string_view(pending_).substr(0, pending_.size() - keep));
    pending_.erase(0, pending_.size() - keep);
    return out;
}

std::string stream_decoder::flush() {
    std::string out;
    detail::append_utf8_lossy(out, pending_);
    pending_.clear();
    return out;
}

}  // namespace calserve::model

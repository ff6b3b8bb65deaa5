// libFuzzer entry point for the GGUF checkpoint reader (model/weights/gguf.cpp): the input
// is a whole file. The property checked is the reader's contract: any bytes give a
// header or an error, never a crash, hang, over-read or exception; a parsed header
// keeps its invariant (every tensor inside the data section, in Hugging Face dim
// order with the right byte size) and the hyperparameter mapping of a parsed header
// (hf_config_from_gguf) yields a config or an error.
#include <cstddef>
#include <cstdint>
#include <span>

#include "model/weights/gguf_model.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace gguf = calserve::model::gguf;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto bytes = std::as_bytes(std::span(data, size));
    bool more = false;
    auto h = gguf::parse_header(bytes, size, "fuzz", &more);
    CALSERVE_FUZZ_CHECK(!more, "a whole file never asks for more bytes");
    if (!h) return 0;
    CALSERVE_FUZZ_CHECK(h->data_offset <= size && h->data_bytes == size - h->data_offset, "data section inside the file");
    for (const auto& t : h->tensors) {
        CALSERVE_FUZZ_CHECK(t.offset + t.bytes <= h->data_bytes, "tensor inside the data section");
        CALSERVE_FUZZ_CHECK(t.bytes == gguf::tensor_bytes(t.type, static_cast<std::uint64_t>(t.elements())),
                            "tensor byte size matches its dims");
    }
    (void)calserve::model::hf_config_from_gguf(*h);
    return 0;
}

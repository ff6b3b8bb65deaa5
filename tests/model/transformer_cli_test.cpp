// top-k selection, greedy runs, and the make-model / reference subcommands end to end.
#include <catch2/catch.hpp>

#include <boost/json.hpp>
#include <cstdlib>
#include <fstream>

#include "model/cpu/transformer_greedy.hpp"
#include "tests/model/transformer_fixture.hpp"

using namespace calserve;

TEST_CASE("top_k_logits returns the best k, ties to the lower id") {
    const std::vector<float> l{0.5f, 2.0f, -1.0f, 2.0f, 3.0f, 0.5f};
    auto top = model::top_k_logits(l, 4);
    REQUIRE(top.size() == 4);
    CHECK(top[0].first == 4);
    CHECK(top[1].first == 1);
    CHECK(top[2].first == 3);
    CHECK(top[3].first == 0);
    CHECK(model::top_k_logits(l, 100).size() == l.size());
}

TEST_CASE("run_greedy follows the argmax and frees the sequence") {
    auto m = test::load_model(test::write_small_model("greedy", test::small_config(false)));
    const std::vector<model::token_id> prompt{5, 6, 7};
    auto run = model::run_greedy(*m, 9, prompt, 6, 3);
    REQUIRE(run.ok());
    REQUIRE(run->generated.size() == 6);
    CHECK(m->sequence_length(9) == 0);
    // Replay by hand: each generated token is the argmax of the previous logits.
    std::vector<float> logits(static_cast<std::size_t>(m->shape().vocab_size));
    REQUIRE(m->prefill(1, prompt, logits).ok());
    for (std::size_t i = 0; i < run->generated.size(); ++i) {
        auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
        CHECK(run->generated[i] == best);
        CHECK(run->steps[i].top.size() == 3);
        CHECK(run->steps[i].top[0].second == logits[static_cast<std::size_t>(best)]);
        REQUIRE(m->decode(1, run->generated[i], logits).ok());
    }
    CHECK_FALSE(model::run_greedy(*m, 9, std::vector<model::token_id>{9999}, 2, 1).ok());
    CHECK(m->sequence_length(9) == 0);
}

TEST_CASE("calserve make-model and reference write the documented files") {
    auto dir = test::scratch_dir("cli");
    const auto bin = test::calserve_binary().string();
    const auto model_dir = dir / "m";
    std::string cmd = bin + " make-model --preset tiny-dense --out " + model_dir.string() + " --seed 3 --dtype f32";
    if (std::filesystem::exists(test::tokenizer_dir() / "tokenizer.json"))
        cmd += " --tokenizer " + test::tokenizer_dir().string();
    REQUIRE(std::system((cmd + " > /dev/null 2>&1").c_str()) == 0);
    REQUIRE(std::filesystem::exists(model_dir / "config.json"));
    std::ofstream(dir / "p.jsonl") << "{\"id\":\"x\",\"token_ids\":[1,2,3]}\n\n{\"id\":7,\"token_ids\":[42]}\n";
    cmd = bin + " reference --model " + model_dir.string() + " --prompts " + (dir / "p.jsonl").string() +
          " --max-tokens 4 --top 2 --output " + (dir / "out.jsonl").string() + " > /dev/null 2>&1";
    REQUIRE(std::system(cmd.c_str()) == 0);
    std::ifstream in(dir / "out.jsonl");
    std::string line;
    std::vector<boost::json::value> rows;
    while (std::getline(in, line)) rows.push_back(boost::json::parse(line));
    REQUIRE(rows.size() == 2);
    CHECK(rows[0].at("id").as_string() == "x");
    CHECK(rows[1].at("id").as_int64() == 7);
    CHECK(rows[0].at("prompt_ids").as_array().size() == 3);
    CHECK(rows[0].at("generated_ids").as_array().size() == 4);
    CHECK(rows[0].at("arithmetic").as_string() == "fp32");  // the default mode, named on every line
    const auto& steps = rows[0].at("steps").as_array();
    REQUIRE(steps.size() == 4);
    CHECK(steps[0].at("top").as_array().size() == 2);
    CHECK(steps[0].at("top").as_array()[0].as_array()[0] == rows[0].at("generated_ids").as_array()[0]);
    // The same run in-process gives the same tokens.
    auto lm = test::load_model(model_dir);
    auto run = model::run_greedy(*lm, 1, std::vector<model::token_id>{1, 2, 3}, 4, 2);
    REQUIRE(run.ok());
    for (std::size_t i = 0; i < 4; ++i) CHECK(rows[0].at("generated_ids").as_array()[i].as_int64() == run->generated[i]);
    // Text prompts go through the tokenizer copied into the model directory.
    if (std::filesystem::exists(model_dir / "tokenizer.json")) {
        std::ofstream(dir / "t.jsonl") << "{\"id\":\"t\",\"text\":\"Hello world\"}\n";
        cmd = bin + " reference --model " + model_dir.string() + " --prompts " + (dir / "t.jsonl").string() +
              " --max-tokens 2 --top 1 --output " + (dir / "t_out.jsonl").string() + " > /dev/null 2>&1";
        REQUIRE(std::system(cmd.c_str()) == 0);
        std::ifstream tin(dir / "t_out.jsonl");
        REQUIRE(std::getline(tin, line));
        auto row = boost::json::parse(line);
        const auto& ids = row.at("prompt_ids").as_array();
        REQUIRE(ids.size() == 2);  // "Hello", " world" in Qwen3's vocabulary
        CHECK(ids[0].as_int64() == 9707);
        CHECK(ids[1].as_int64() == 1879);
    }
    // --arithmetic bf16: named on every line.
    cmd = bin + " reference --model " + model_dir.string() + " --prompts " + (dir / "p.jsonl").string() +
          " --max-tokens 4 --top 2 --arithmetic bf16 --output " + (dir / "out16.jsonl").string() + " > /dev/null 2>&1";
    REQUIRE(std::system(cmd.c_str()) == 0);
    std::ifstream in16(dir / "out16.jsonl");
    REQUIRE(std::getline(in16, line));
    CHECK(boost::json::parse(line).at("arithmetic").as_string() == "bf16");
    cmd = bin + " reference --model " + model_dir.string() + " --prompts " + (dir / "p.jsonl").string() +
          " --arithmetic fp16 --output " + (dir / "o3.jsonl").string() + " > /dev/null 2>&1";
    CHECK(WEXITSTATUS(std::system(cmd.c_str())) != 0);
    // Unusable input: exit code 2.
    std::ofstream(dir / "bad.jsonl") << "{\"id\":1}\n";
    cmd = bin + " reference --model " + model_dir.string() + " --prompts " + (dir / "bad.jsonl").string() +
          " --output " + (dir / "o2.jsonl").string() + " > /dev/null 2>&1";
    CHECK(WEXITSTATUS(std::system(cmd.c_str())) == 2);
}

// text::redactSecrets: what leaves a run in a bundle (dtrun bundle) or a record (run.json, each
// rank's environment) keeps no token or password, and loses nothing else.
#include <string>

#include <catch2/catch.hpp>

#include "text.h"

using dtrun::text::redactSecrets;

TEST_CASE("a secret's value is redacted in env lines, --rdzv_conf and Python's dict form",
          "[common][redact]") {
  CHECK(redactSecrets("DTRUN_STORE_TOKEN=s3cr3t") == "DTRUN_STORE_TOKEN=<redacted>");
  CHECK(redactSecrets("RANK=0\nDTRUN_STORE_TOKEN=abc\nWORLD_SIZE=2\n") ==
        "RANK=0\nDTRUN_STORE_TOKEN=<redacted>\nWORLD_SIZE=2\n");
  CHECK(redactSecrets("--rdzv_conf=user=u,password=pw,token=t0k,join_timeout=5") ==
        "--rdzv_conf=user=u,password=<redacted>,token=<redacted>,join_timeout=5");
  CHECK(redactSecrets("DTRUN_ETCD_PASSWORD=x y") == "DTRUN_ETCD_PASSWORD=<redacted> y");
  CHECK(redactSecrets("{'HF_TOKEN': 'hf_abc', 'RANK': '1'}") ==
        "{'HF_TOKEN': '<redacted>', 'RANK': '1'}");
  CHECK(redactSecrets(R"({"password": "p", "user": "u"})") ==
        R"({"password": "<redacted>", "user": "u"})");
  CHECK(redactSecrets("Password=Hunter2") == "Password=<redacted>");
}

TEST_CASE("text without a secret's value is left as it is", "[common][redact]") {
  for (const std::string text :
       {"", "RANK=0", "DTRUN_STORE_TOKEN_FILE=/run/token", "tokens=3", "a token of trust",
        "password", "token=", "PASSWORD='", "no secret here: token_file=/x"}) {
    CAPTURE(text);
    CHECK(redactSecrets(text) == text);
  }
}

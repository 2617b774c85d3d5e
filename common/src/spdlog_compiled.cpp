// spdlog's and fmt's own code, compiled once for all of dtrun: every other source includes their
// headers with SPDLOG_COMPILED_LIB and without FMT_HEADER_ONLY (common/CMakeLists.txt), so that
// a translation unit no longer compiles both libraries again (about 8 s of CPU per unity batch,
// in each of CI's five trees). Linked in, as the header-only form was: the portable binary still
// loads nothing at run time.
#ifndef SPDLOG_COMPILED_LIB
#error "spdlog_compiled.cpp is built with SPDLOG_COMPILED_LIB (target dtrun_spdlog)"
#endif

#include <mutex>

#include <fmt/format-inl.h>
#include <spdlog/cfg/helpers-inl.h>
#include <spdlog/common-inl.h>
#include <spdlog/details/backtracer-inl.h>
#include <spdlog/details/log_msg-inl.h>
#include <spdlog/details/log_msg_buffer-inl.h>
#include <spdlog/details/os-inl.h>
#include <spdlog/details/periodic_worker-inl.h>
#include <spdlog/details/registry-inl.h>
#include <spdlog/logger-inl.h>
#include <spdlog/pattern_formatter-inl.h>
#include <spdlog/sinks/ansicolor_sink-inl.h>
#include <spdlog/sinks/base_sink-inl.h>
#include <spdlog/sinks/sink-inl.h>
#include <spdlog/sinks/stdout_color_sinks-inl.h>
#include <spdlog/spdlog-inl.h>

// What fmt declares `extern template` when it is not header-only.
FMT_BEGIN_NAMESPACE
namespace detail {
template auto thousands_sep_impl<char>(locale_ref) -> thousands_sep_result<char>;
template auto thousands_sep_impl<wchar_t>(locale_ref) -> thousands_sep_result<wchar_t>;
template auto decimal_point_impl(locale_ref) -> char;
template auto decimal_point_impl(locale_ref) -> wchar_t;
}  // namespace detail
FMT_END_NAMESPACE

// The sinks dtrun's loggers use (common/src/log.cpp), and the registry's default one.
template class spdlog::sinks::base_sink<std::mutex>;
template class spdlog::sinks::ansicolor_sink<spdlog::details::console_mutex>;
template class spdlog::sinks::ansicolor_stdout_sink<spdlog::details::console_mutex>;
template class spdlog::sinks::ansicolor_stderr_sink<spdlog::details::console_mutex>;
template std::shared_ptr<spdlog::logger> spdlog::stderr_color_mt<spdlog::synchronous_factory>(
    const std::string& logger_name, color_mode mode);

// The one translation unit that compiles Boost.Asio and Boost.Beast
// (separate compilation: every other file includes only their headers).
#include <boost/asio/impl/src.hpp>
#include <boost/beast/src.hpp>

#pragma once
// Readable words for cpp-httplib's transport errors (its own names are terse: "Connection", "Read").
// Included by .cpp files only, so that headers stay free of httplib.
#include <string>

#include <httplib.h>

namespace moeserve::bench {

inline std::string describe(httplib::Error error) {
  switch (error) {
    case httplib::Error::Connection: return "connection failed (nothing listening, or refused)";
    case httplib::Error::ConnectionTimeout: return "connection timed out";
    case httplib::Error::Read: return "read error (the server closed or reset the connection)";
    case httplib::Error::Write: return "write error (the server closed the connection)";
    case httplib::Error::Canceled: return "cancelled";
    case httplib::Error::SSLConnection: return "TLS connection failed";
    case httplib::Error::SSLServerVerification: return "TLS server verification failed";
    default: return httplib::to_string(error) + " error";
  }
}

}  // namespace moeserve::bench

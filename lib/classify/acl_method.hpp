// rte_acl's classify methods by the names dpdk-test-acl's --alg gives them: firewall.acl_method, the log and the
// benchmarks spell them so. Header-only (the config decoder uses it without the classifier). Pure.
#pragma once

#include <string>
#include <string_view>

#include <rte_acl.h>

namespace sluice {

struct AclMethod {
    enum rte_acl_classify_alg alg;  // `enum`: a function of the same name hides the type in C++
    const char* name;
    bool timed;  // AclClassifier times it: all but scalar, which never wins where any other runs
};

inline constexpr AclMethod kAclMethods[] = {{RTE_ACL_CLASSIFY_SCALAR, "scalar", false},
                                            {RTE_ACL_CLASSIFY_SSE, "sse", true},
                                            {RTE_ACL_CLASSIFY_AVX2, "avx2", true},
                                            {RTE_ACL_CLASSIFY_AVX512X16, "avx512x16", true},
                                            {RTE_ACL_CLASSIFY_AVX512X32, "avx512x32", true}};

// The method of a name, RTE_ACL_CLASSIFY_DEFAULT (0) for "auto", or -1 for another name.
inline int acl_method_by_name(std::string_view name) {
    if (name == "auto") return RTE_ACL_CLASSIFY_DEFAULT;
    for (const AclMethod& m : kAclMethods)
        if (name == m.name) return m.alg;
    return -1;
}

// The name of a method: "auto" for RTE_ACL_CLASSIFY_DEFAULT, "unknown" for a value that is none of them.
inline const char* acl_method_name(int method) {
    for (const AclMethod& m : kAclMethods)
        if (method == m.alg) return m.name;
    return method == RTE_ACL_CLASSIFY_DEFAULT ? "auto" : "unknown";
}

// Every name, "auto" first, for messages: "auto, scalar, sse, avx2, avx512x16, avx512x32".
inline std::string acl_method_names() {
    std::string names = "auto";
    for (const AclMethod& m : kAclMethods) names += std::string(", ") + m.name;
    return names;
}

}  // namespace sluice

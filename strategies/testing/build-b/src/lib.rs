//! Test fixture TEST_BUILD, build "b": answers at once, naming its build, so
//! a hot-reload test can tell which version served each request.

use couponlab_sdk::IssueResult;

couponlab_sdk::strategy! {
    struct Build { method: "TEST_BUILD", claims: [], summary: "reports its build (test fixture)" }
    fn issue(_request) { IssueResult::issued().detail("build b") }
}

//! Reading objects whose kind may not be served: one reading of the API server's 404s for every
//! daemon and the plugin.
//!
//! ```text
//!  GET …/<kind>/<name> ──► 200            ──► Some(object)
//!                      ├─► 404 names it   ──► None   (the object is absent)
//!                      ├─► 404 names none ──► None   (the kind is not served: its CRD is missing)
//!                      └─► anything else  ──► Err
//! ```
//!
//! kube-apiserver answers a request for a group or resource it does not serve with a plain-text
//! `404 page not found`; the client keeps the code but cannot parse a reason, so kube's own
//! `Api::get_opt` (which looks for the reason `NotFound`) returns an error there. An unknown
//! resource of a built-in group gets a `NotFound` Status that names no object. A missing object's
//! 404 always names the object. Details and a test on the real server: `docs/kube-emulator.md`.

use kube::Api;

/// True when `err` says that the API server does not serve the requested kind at all (its
/// CustomResourceDefinition is not installed), rather than that one object is absent: a 404 that
/// names no object.
pub fn kind_not_served(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s)
        if s.code == 404 && s.details.as_ref().is_none_or(|d| d.name.is_empty()))
}

/// True for any 404: the object is absent, or its kind is not served.
pub fn is_absent(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 404)
}

/// `Api::get`, with `None` when the object is absent or its kind is not served (on kube-apiserver
/// as on the emulator); every other failure is returned.
pub async fn get_opt<K>(api: &Api<K>, name: &str) -> kube::Result<Option<K>>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get(name).await {
        Ok(o) => Ok(Some(o)),
        Err(e) if is_absent(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::{Status, response::StatusDetails};

    fn api(s: Status) -> kube::Error {
        kube::Error::Api(s.boxed())
    }

    fn details(name: &str) -> StatusDetails {
        StatusDetails {
            name: name.into(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            causes: Vec::new(),
            retry_after_seconds: 0,
        }
    }

    #[test]
    fn a_404_that_names_no_object_is_a_kind_not_served() {
        // kube-apiserver's plain-text `404 page not found`, as the client reconstructs it.
        let plain =
            Status::failure("404 page not found", "Failed to parse error data").with_code(404);
        // An unknown resource of a built-in group (and the emulator's answer for any unserved kind).
        let no_resource = Status::failure(
            "the server could not find the requested resource",
            "NotFound",
        )
        .with_code(404)
        .with_details(details(""));
        let missing_object =
            Status::failure("clusters.postgresql.cnpg.io \"x\" not found", "NotFound")
                .with_code(404)
                .with_details(details("x"));
        let forbidden = Status::failure("forbidden", "Forbidden").with_code(403);
        assert!(kind_not_served(&api(plain.clone())));
        assert!(kind_not_served(&api(no_resource)));
        assert!(!kind_not_served(&api(missing_object.clone())));
        assert!(!kind_not_served(&api(forbidden.clone())));
        // Both kinds of 404 are an absent object to get_opt; a refusal is not.
        assert!(is_absent(&api(plain)));
        assert!(is_absent(&api(missing_object)));
        assert!(!is_absent(&api(forbidden)));
    }
}

//! `objectstorage.k8s.io/v1alpha1`: COSI `BucketClaim`.

use super::view;

view! {
    /// A COSI bucket claim; the driver writes the real bucket name to `status.bucketName`.
    kind "BucketClaim" ("objectstorage.k8s.io", "v1alpha1", "bucketclaims", namespaced);
    spec BucketClaimSpec {
        /// Bucket class.
        bucket_class_name: String,
        /// Protocols, e.g. `["s3"]`.
        protocols: Vec<String>,
        /// Bind to an existing bucket.
        existing_bucket_name: String,
    }
    status BucketClaimStatus = "BucketClaimStatus" {
        /// Whether the bucket is provisioned.
        bucket_ready: bool,
        /// The real bucket name (`bucket-<claim uid>`).
        bucket_name: String,
    }
}

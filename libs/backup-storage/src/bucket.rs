//! Bucket-name resolution (upstream helper `backupstrategy-controller.bucketName`).

/// Inputs of the bucket-name decision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BucketInputs<'a> {
    /// `backupStorage.provisionBucket`.
    pub provision_bucket: bool,
    /// `backupStorage.bucketName`.
    pub bucket_name: &'a str,
    /// `backupStorage.bucketNameOverride`.
    pub bucket_name_override: &'a str,
    /// `status.bucketName` of BucketClaim `bucket-<bucketName>`, when the claim exists.
    pub claim_bucket_name: Option<&'a str>,
}

/// The resolved real bucket name B, or `None` when the gated objects must not be rendered yet.
///
/// First row that applies: `provisionBucket: false` → `bucketName` verbatim (the override is
/// ignored); the claim's non-empty `status.bucketName` (wins over the override); a non-empty
/// override; otherwise nothing.
pub fn resolve_bucket_name(inputs: &BucketInputs<'_>) -> Option<String> {
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    if !inputs.provision_bucket {
        return non_empty(inputs.bucket_name);
    }
    inputs
        .claim_bucket_name
        .and_then(non_empty)
        .or_else(|| non_empty(inputs.bucket_name_override))
}

/// Name of the BucketClaim the COSI chart renders for Bucket `bucket_name`.
pub fn bucket_claim_name(bucket_name: &str) -> String {
    format!("bucket-{bucket_name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_table() {
        let case = |provision, name, over, claim| {
            resolve_bucket_name(&BucketInputs {
                provision_bucket: provision,
                bucket_name: name,
                bucket_name_override: over,
                claim_bucket_name: claim,
            })
        };
        // provisionBucket=false: bucketName verbatim, override ignored.
        assert_eq!(
            case(false, "ext", "over", Some("claimed")),
            Some("ext".into())
        );
        // The claim wins over the override.
        assert_eq!(
            case(true, "cozy-backups", "over", Some("bucket-uid")),
            Some("bucket-uid".into())
        );
        // Empty or missing claim status: the override.
        assert_eq!(
            case(true, "cozy-backups", "over", Some("")),
            Some("over".into())
        );
        assert_eq!(
            case(true, "cozy-backups", "over", None),
            Some("over".into())
        );
        // Nothing: skip.
        assert_eq!(case(true, "cozy-backups", "", None), None);
        assert_eq!(bucket_claim_name("cozy-backups"), "bucket-cozy-backups");
    }
}

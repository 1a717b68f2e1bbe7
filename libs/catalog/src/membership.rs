//! The live-member registry: every role process keeps `members/<role>/<id>` under its lease
//! (ARCHITECTURE §2); this reads it, as owner selection and clients need it.

use logstore::keys::Keys;
use logstore::records::MemberRecord;
use metadata::{MetadataStore, RangeRequest};
use prost::Message;

use crate::CatalogError;
use crate::routing::Member;

/// The live members of a role, sorted by id, and the revision they were read at (owner
/// selection must not change without the member set's revision changing).
pub async fn live_members(
    meta: &dyn MetadataStore,
    cluster: &str,
    role: &str,
) -> Result<(Vec<Member>, i64), CatalogError> {
    let mut prefix = Keys::new(cluster).member(role, "");
    if prefix.last() != Some(&b'/') {
        prefix.push(b'/');
    }
    let resp = meta.range(RangeRequest::prefix(prefix)).await?;
    let mut members = Vec::with_capacity(resp.kvs.len());
    for kv in resp.kvs {
        let r = MemberRecord::decode(kv.value.as_slice())
            .map_err(|_| CatalogError::Corrupt(String::from_utf8_lossy(&kv.key).into_owned()))?;
        members.push(Member { id: r.id, zone: r.zone, address: r.address });
    }
    members.sort_by(|a, b| a.id.cmp(&b.id));
    Ok((members, resp.revision))
}

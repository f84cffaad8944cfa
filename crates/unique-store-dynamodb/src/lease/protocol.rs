//! The D10 protocol itself: consistent reads, conditional writes under a fresh record
//! version, the epoch counter, and the [`LeaseBackend`] built on them (leases and the
//! node registry).

use std::time::Duration;

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use unique_lease::{
    LeaseBackend, LeaseError, StoredLease, StoredNode, async_trait, new_lease_token,
};

use super::error::{lease_error, unavailable};
use super::expiry::{ceil_ms, floor_ms};
use super::item::{
    ADDR, EPOCH, EPOCH_KEY, EXPIRES_MS, Expect, Holding, NODE, RVN, Record, TOKEN, TTL_MS,
    UPDATED_MS, corrupt, decode, lease_key, node_key, number, string,
};
use super::{DynamoDirectory, GC_AT};
use crate::codec::{Item, PK};
use crate::error::{self, UpdateFailure};

/// How many times one `ensure_owner` reads the lease and tries its conditional write
/// before giving up with `Unavailable`. Every failed condition means another write
/// landed in between; two rounds settle a race on a free room, and each round of a
/// longer one lets one writer through.
const ENSURE_ROUNDS: usize = 16;

/// How long a node item outlives its registration before DynamoDB's TTL (when enabled on
/// [`GC_AT`]) may delete it. Generous, because the expiry it is added to was computed on
/// the writer's clock.
const NODE_GC_GRACE: Duration = Duration::from_hours(1);

impl DynamoDirectory {
    /// A strongly consistent `GetItem` of `pk`.
    async fn get(&self, pk: &str) -> Result<Option<Item>, LeaseError> {
        let out = self
            .client
            .get_item()
            .table_name(&*self.table)
            .key(PK, AttributeValue::S(pk.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| lease_error(error::classify("GetItem", e)))?;
        Ok(out.item)
    }

    fn update(&self, pk: &str) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&*self.table)
            .key(PK, AttributeValue::S(pk.to_owned()))
    }

    /// Sends a conditional update; `Ok(false)` when its condition failed.
    async fn conditional(&self, request: UpdateItemFluentBuilder) -> Result<bool, LeaseError> {
        match request.send().await {
            Ok(_) => Ok(true),
            Err(e) => match error::update_failure(e) {
                UpdateFailure::ConditionFailed(_) => Ok(false),
                UpdateFailure::Error(e) => Err(lease_error(e)),
            },
        }
    }

    /// The next epoch of the directory's counter (D4).
    async fn next_epoch(&self) -> Result<u64, LeaseError> {
        let out = self
            .update(EPOCH_KEY)
            .update_expression("ADD #epoch :one")
            .expression_attribute_names("#epoch", EPOCH)
            .expression_attribute_values(":one", AttributeValue::N("1".to_owned()))
            .return_values(ReturnValue::UpdatedNew)
            .send()
            .await
            .map_err(|e| lease_error(error::classify("UpdateItem", e)))?;
        let counter = out.attributes().cloned().unwrap_or_default();
        number(&counter, EPOCH, "epoch counter")?
            .ok_or_else(|| corrupt("epoch counter", "the counter update returned no epoch"))
    }

    /// A new holding of `room_id` for `node_id` (D1, D4), written only if the item is
    /// still as read (`expect`); `None` when it was not.
    async fn grant(
        &self,
        room_id: &str,
        node_id: &str,
        ttl_ms: u64,
        expect: Expect<'_>,
    ) -> Result<Option<StoredLease>, LeaseError> {
        // Drawn after the read `expect` comes from: every holding of the room written
        // before that read drew its epoch earlier, so this one is greater (D4).
        let epoch = self.next_epoch().await?;
        let lease_token = new_lease_token();
        let rvn = new_lease_token();
        let request = self
            .update(&lease_key(room_id))
            .update_expression(
                "SET #node = :node, #token = :token, #epoch = :epoch, #ttl = :ttl, #rvn = :rvn",
            )
            .expression_attribute_names("#node", NODE)
            .expression_attribute_names("#token", TOKEN)
            .expression_attribute_names("#epoch", EPOCH)
            .expression_attribute_names("#ttl", TTL_MS)
            .expression_attribute_names("#rvn", RVN)
            .expression_attribute_values(":node", AttributeValue::S(node_id.to_owned()))
            .expression_attribute_values(":token", AttributeValue::S(lease_token.clone()))
            .expression_attribute_values(":epoch", AttributeValue::N(epoch.to_string()))
            .expression_attribute_values(":ttl", AttributeValue::N(ttl_ms.to_string()))
            .expression_attribute_values(":rvn", AttributeValue::S(rvn.clone()));
        let request = expect.condition(request);
        let sent = self.ticker.now();
        if !self.conditional(request).await? {
            return Ok(None);
        }
        self.observations().saw(room_id, &rvn, sent);
        Ok(Some(StoredLease {
            node_id: node_id.to_owned(),
            lease_token,
            epoch,
            ttl_left_ms: self.left_ms(ttl_ms, sent),
        }))
    }

    /// Renews the caller's valid holding `held`, first seen at `first_seen` (D2): a new
    /// version lasting `max(ttl, what the current one has left)`. `None` when the item
    /// changed meanwhile, or the holding ran out before the write could be sent.
    async fn renew(
        &self,
        room_id: &str,
        held: Holding,
        first_seen: Duration,
        ttl_ms: u64,
    ) -> Result<Option<StoredLease>, LeaseError> {
        let rvn = new_lease_token();
        let sent = self.ticker.now();
        let left =
            Duration::from_millis(held.ttl_ms).saturating_sub(sent.saturating_sub(first_seen));
        if left.is_zero() {
            // Expired on the way: decide again, which takes it over (D1).
            return Ok(None);
        }
        // Rounded up: a renewal must never shorten the promise (D2).
        let lasts_ms = ttl_ms.max(ceil_ms(left));
        let request = self
            .update(&lease_key(room_id))
            .update_expression("SET #rvn = :rvn, #ttl = :ttl")
            .expression_attribute_names("#rvn", RVN)
            .expression_attribute_names("#ttl", TTL_MS)
            .expression_attribute_values(":rvn", AttributeValue::S(rvn.clone()))
            .expression_attribute_values(":ttl", AttributeValue::N(lasts_ms.to_string()));
        let request = Expect::Version(&held.rvn).condition(request);
        if !self.conditional(request).await? {
            return Ok(None);
        }
        self.observations().saw(room_id, &rvn, sent);
        Ok(Some(StoredLease {
            node_id: held.node_id,
            lease_token: held.lease_token,
            epoch: held.epoch,
            ttl_left_ms: self.left_ms(lasts_ms, sent),
        }))
    }

    /// Whole milliseconds left of `ttl_ms` counted from `since`, now.
    fn left_ms(&self, ttl_ms: u64, since: Duration) -> u64 {
        let seen_for = self.ticker.now().saturating_sub(since);
        floor_ms(Duration::from_millis(ttl_ms).saturating_sub(seen_for))
    }
}

#[async_trait]
impl LeaseBackend for DynamoDirectory {
    async fn read_lease(&self, room_id: &str) -> Result<Option<StoredLease>, LeaseError> {
        let item = self.get(&lease_key(room_id)).await?;
        let at = self.ticker.now();
        match decode(item.as_ref())? {
            Record::Absent | Record::Free { .. } => Ok(None),
            Record::Held(held) => {
                let first_seen = self.observations().saw(room_id, &held.rvn, at);
                let left = held.left(at.saturating_sub(first_seen));
                Ok(Some(held.report(left)))
            }
        }
    }

    async fn ensure_lease(
        &self,
        room_id: &str,
        node_id: &str,
        ttl_ms: u64,
    ) -> Result<StoredLease, LeaseError> {
        for _ in 0..ENSURE_ROUNDS {
            let item = self.get(&lease_key(room_id)).await?;
            let at = self.ticker.now();
            let written = match decode(item.as_ref())? {
                Record::Absent => self.grant(room_id, node_id, ttl_ms, Expect::Absent).await?,
                Record::Free { rvn } => {
                    self.grant(room_id, node_id, ttl_ms, Expect::Version(&rvn))
                        .await?
                }
                Record::Held(held) => {
                    let first_seen = self.observations().saw(room_id, &held.rvn, at);
                    let left = held.left(at.saturating_sub(first_seen));
                    if left.is_zero() {
                        // Expired for this instance: take it over (D1), whoever held it.
                        self.grant(room_id, node_id, ttl_ms, Expect::Version(&held.rvn))
                            .await?
                    } else if held.node_id == node_id {
                        self.renew(room_id, held, first_seen, ttl_ms).await?
                    } else {
                        // Another node's valid lease: report it, write nothing (D3).
                        return Ok(held.report(left));
                    }
                }
            };
            if let Some(lease) = written {
                return Ok(lease);
            }
        }
        Err(unavailable(format!(
            "dynamodb lease of the room changed during {ENSURE_ROUNDS} attempts in a row"
        )))
    }

    async fn release_lease(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
    ) -> Result<bool, LeaseError> {
        // The tombstone keeps the item (see the type's docs) under a new version, so a
        // grant conditioned on the released holding's version cannot land afterwards.
        let request = self
            .update(&lease_key(room_id))
            .update_expression("SET #rvn = :rvn REMOVE #node, #token, #ttl")
            .condition_expression("#node = :node AND #token = :token")
            .expression_attribute_names("#rvn", RVN)
            .expression_attribute_names("#node", NODE)
            .expression_attribute_names("#token", TOKEN)
            .expression_attribute_names("#ttl", TTL_MS)
            .expression_attribute_values(":rvn", AttributeValue::S(new_lease_token()))
            .expression_attribute_values(":node", AttributeValue::S(node_id.to_owned()))
            .expression_attribute_values(":token", AttributeValue::S(lease_token.to_owned()));
        self.conditional(request).await
    }

    async fn write_node(
        &self,
        node_id: &str,
        grpc_addr: &str,
        ttl_ms: u64,
    ) -> Result<StoredNode, LeaseError> {
        let now_ms = self.wall_ms()?;
        let expires_ms = now_ms.saturating_add(ttl_ms);
        let gc_at = (expires_ms / 1_000).saturating_add(NODE_GC_GRACE.as_secs());
        self.update(&node_key(node_id))
            .update_expression(
                "SET #addr = :addr, #updated = :updated, #expires = :expires, #gc = :gc",
            )
            .expression_attribute_names("#addr", ADDR)
            .expression_attribute_names("#updated", UPDATED_MS)
            .expression_attribute_names("#expires", EXPIRES_MS)
            .expression_attribute_names("#gc", GC_AT)
            .expression_attribute_values(":addr", AttributeValue::S(grpc_addr.to_owned()))
            .expression_attribute_values(":updated", AttributeValue::N(now_ms.to_string()))
            .expression_attribute_values(":expires", AttributeValue::N(expires_ms.to_string()))
            .expression_attribute_values(":gc", AttributeValue::N(gc_at.to_string()))
            .send()
            .await
            .map_err(|e| lease_error(error::classify("UpdateItem", e)))?;
        Ok(StoredNode {
            grpc_addr: grpc_addr.to_owned(),
            age_ms: 0,
            ttl_left_ms: ttl_ms,
        })
    }

    async fn read_node(&self, node_id: &str) -> Result<Option<StoredNode>, LeaseError> {
        let Some(item) = self.get(&node_key(node_id)).await? else {
            return Ok(None);
        };
        let what = "node registration";
        let grpc_addr = string(&item, ADDR, what)?;
        let updated_ms = number(&item, UPDATED_MS, what)?;
        let expires_ms = number(&item, EXPIRES_MS, what)?;
        let (Some(grpc_addr), Some(updated_ms), Some(expires_ms)) =
            (grpc_addr, updated_ms, expires_ms)
        else {
            return Err(corrupt(what, "addr, updated_ms or expires_ms is missing"));
        };
        let now_ms = self.wall_ms()?;
        if now_ms >= expires_ms {
            // Expired: DynamoDB's TTL (when enabled) deletes it; reading writes nothing.
            return Ok(None);
        }
        Ok(Some(StoredNode {
            grpc_addr: grpc_addr.to_owned(),
            age_ms: now_ms.saturating_sub(updated_ms),
            ttl_left_ms: expires_ms - now_ms,
        }))
    }

    async fn delete_node(&self, node_id: &str) -> Result<(), LeaseError> {
        self.client
            .delete_item()
            .table_name(&*self.table)
            .key(PK, AttributeValue::S(node_key(node_id)))
            .send()
            .await
            .map_err(|e| lease_error(error::classify("DeleteItem", e)))?;
        Ok(())
    }
}

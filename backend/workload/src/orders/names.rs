//! Order names: a tenant may name an order; one it does not name is called
//! after its instance type and two words drawn from its id, such as
//! `h100x8-swift-otter`, so that orders made in the same minute, or the
//! members of one array, read differently at a glance.

use uuid::Uuid;

use gantry_core::validate::Fields;

/// The longest name, a DNS label's length, so that a name can name a host.
pub const NAME_MAX: usize = 63;

/// The longest generated name: it leaves room for an array member's
/// `-<index>`.
const GENERATED_MAX: usize = NAME_MAX - "-".len() - INDEX_DIGITS_MAX;

/// Digits of the highest index of an array.
const INDEX_DIGITS_MAX: usize = (crate::jobs::ARRAY_MAX - 1).ilog10() as usize + 1;

const ADJECTIVES: [&str; 64] = [
    "able", "amber", "ample", "azure", "bold", "brave", "brisk", "calm", "clear", "clever",
    "coral", "crisp", "daring", "eager", "early", "easy", "fair", "fancy", "fast", "fine", "firm",
    "fleet", "fresh", "gentle", "glad", "golden", "grand", "green", "happy", "hardy", "jolly",
    "keen", "kind", "lively", "lucid", "lucky", "merry", "mighty", "misty", "noble", "olive",
    "plucky", "polite", "proud", "quick", "quiet", "rapid", "ready", "royal", "rustic", "sage",
    "sharp", "shiny", "silver", "sleek", "smart", "snowy", "solid", "steady", "sunny", "swift",
    "tidy", "vivid", "witty",
];

const ANIMALS: [&str; 64] = [
    "alpaca", "badger", "beaver", "bison", "bobcat", "camel", "cheetah", "condor", "cougar",
    "coyote", "crane", "dingo", "dolphin", "eagle", "egret", "falcon", "ferret", "finch", "fox",
    "gazelle", "gecko", "gibbon", "heron", "husky", "ibex", "iguana", "jackal", "jaguar", "koala",
    "lemur", "leopard", "lynx", "magpie", "marmot", "marten", "mink", "moose", "narwhal", "ocelot",
    "orca", "osprey", "otter", "owl", "panda", "panther", "pelican", "penguin", "puffin", "quail",
    "raven", "robin", "salmon", "seal", "sparrow", "stork", "swan", "tapir", "tiger", "toucan",
    "turtle", "walrus", "weasel", "wolf", "zebra",
];

/// The name of an order with id `id` of instance type `instance_type`
/// that was given none. The words come from the id's random bits, not its
/// timestamp, so ids made together still give different names.
pub fn generated(instance_type: &str, id: Uuid) -> String {
    let bits = u64::from_be_bytes(id.as_bytes()[8..16].try_into().unwrap_or_default());
    let adjective = ADJECTIVES[(bits % 64) as usize];
    let animal = ANIMALS[((bits >> 6) % 64) as usize];
    let prefix: String = instance_type
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(GENERATED_MAX - 1 - adjective.len() - 1 - animal.len())
        .collect();
    let prefix = prefix.trim_start_matches('-');
    if prefix.is_empty() {
        format!("{adjective}-{animal}")
    } else {
        format!("{prefix}-{adjective}-{animal}")
    }
}

/// Checks a name a tenant gave: a slug, as names of projects are. An
/// array's members are called `<name>-<index>`, which must fit too.
pub fn check(fields: &mut Fields, name: &str, array_count: Option<i32>) {
    fields.slug("name", name);
    let Some(count) = array_count else {
        return;
    };
    let suffix = 1 + (count.max(1) - 1).to_string().len();
    if name.len() + suffix > NAME_MAX {
        fields.push(
            "name",
            format!(
                "at most {} characters for an array of {count}: its members are called `<name>-<index>`",
                NAME_MAX - suffix
            ),
        );
    }
}

/// The name of member `index` of an array called `name`.
pub fn member(name: &str, index: i32) -> String {
    format!("{name}-{index}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_made_together_get_different_names() {
        let names: std::collections::HashSet<String> = (0..50)
            .map(|_| generated("h100x8", Uuid::now_v7()))
            .collect();
        // 4,096 word pairs: fifty draws rarely repeat, and never all alike.
        assert!(names.len() > 40, "{names:?}");
        assert!(names.iter().all(|n| n.starts_with("h100x8-")));
    }

    #[test]
    fn a_generated_name_is_a_valid_name() {
        for instance_type in ["h100x8", "L40S x1", "--", "a".repeat(80).as_str()] {
            let name = generated(instance_type, Uuid::now_v7());
            let mut fields = Fields::default();
            check(&mut fields, &name, None);
            assert!(fields.finish().is_ok(), "{name}");
        }
    }

    #[test]
    fn a_generated_array_name_leaves_room_for_every_index() {
        let base = generated(&"a".repeat(80), Uuid::now_v7());
        let last = member(&base, crate::jobs::ARRAY_MAX - 1);
        assert!(last.len() <= NAME_MAX, "{last}");
    }

    #[test]
    fn names_are_dns_labels() {
        let refused = |name: &str, count: Option<i32>| {
            let mut fields = Fields::default();
            check(&mut fields, name, count);
            fields.finish().is_err()
        };
        assert!(!refused("train-llama-7b", None));
        assert!(refused("", None));
        assert!(refused("Train", None));
        assert!(refused("-train", None));
        assert!(refused("train_run", None));
        assert!(refused(&"a".repeat(64), None));
        assert!(!refused(&"a".repeat(63), None));
        // Member 99 of a hundred is `<name>-99`.
        assert!(refused(&"a".repeat(61), Some(100)));
        assert!(!refused(&"a".repeat(60), Some(100)));
    }
}

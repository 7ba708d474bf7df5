// SPDX-License-Identifier: Apache-2.0
//! Settings spelled as one of a few keywords, shared by several sections so
//! that every such setting lists its choices in errors the same way.

/// `ALL`, `as_str`, Display and FromStr for a setting spelled as one of a
/// few keywords; the error lists them. Paths are spelled out in full as the
/// macro expands in each section's module.
macro_rules! keywords {
    ($ty:ident, $what:literal, { $($variant:ident => $word:literal),+ $(,)? }) => {
        impl $ty {
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $word),+
                }
            }
        }

        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $ty {
            /// A human-readable reason.
            type Err = String;

            fn from_str(s: &str) -> ::std::result::Result<Self, String> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s).ok_or_else(|| {
                    format!(
                        concat!("unknown ", $what, " `{}`; expected one of {}"),
                        s,
                        [$($word),+].join(", ")
                    )
                })
            }
        }
    };
}

pub(crate) use keywords;

//! Instructions of the SPL programs litesvm ships, built by hand where the
//! program has no interface crate in the tree (associated token accounts).

use solana_address::Address;
use solana_instruction::{AccountMeta, Instruction};

/// spl-token.
pub const TOKEN_PROGRAM: Address =
    Address::from_str_const("TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA");
/// token-2022: its accounts count for token balances too.
pub const TOKEN_2022_PROGRAM: Address =
    Address::from_str_const("TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb");
/// The associated token account program.
pub const ATA_PROGRAM: Address =
    Address::from_str_const("ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL");

/// The associated (spl-token) token account of `owner` for `mint`.
pub fn associated_token_address(owner: &Address, mint: &Address) -> Address {
    Address::find_program_address(
        &[owner.as_ref(), TOKEN_PROGRAM.as_ref(), mint.as_ref()],
        &ATA_PROGRAM,
    )
    .0
}

/// `CreateIdempotent` (data `[1]`): the program pays the new account's rent
/// from `payer` by a CPI into the system program, then initializes it by a
/// CPI into spl-token; nothing happens if the account exists.
pub(crate) fn create_ata_idempotent(
    payer: &Address,
    owner: &Address,
    mint: &Address,
) -> Instruction {
    Instruction {
        program_id: ATA_PROGRAM,
        accounts: vec![
            AccountMeta::new(*payer, true),
            AccountMeta::new(associated_token_address(owner, mint), false),
            AccountMeta::new_readonly(*owner, false),
            AccountMeta::new_readonly(*mint, false),
            AccountMeta::new_readonly(solana_system_interface::program::ID, false),
            AccountMeta::new_readonly(TOKEN_PROGRAM, false),
        ],
        data: vec![1],
    }
}

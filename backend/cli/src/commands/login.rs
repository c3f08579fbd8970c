//! `login`, `logout`, `whoami`.

use std::io::{BufRead as _, IsTerminal as _};
use std::path::Path;

use http::header::COOKIE;
use serde_json::json;

use crate::api::{self, Api, read};
use crate::args::{Login, Output};
use crate::config::{self, Config, Credential};
use crate::error::{CliError, CliResult};
use crate::http::Http;
use crate::output;
use crate::routes;
use crate::views::Me;

fn read_stdin_line(what: &str) -> CliResult<String> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| CliError::Usage(format!("reading the {what} from standard input: {e}")))?;
    let line = line.trim_end_matches(['\r', '\n']).to_owned();
    if line.is_empty() {
        return Err(CliError::Usage(format!("no {what} on standard input")));
    }
    Ok(line)
}

pub async fn login(
    path: &Path,
    server: Option<String>,
    org: Option<String>,
    args: Login,
) -> CliResult<()> {
    let server = match server {
        Some(server) => server,
        None => config::load(path)?.map(|c| c.server).ok_or_else(|| {
            CliError::Usage("which server? pass --server https://… (or set GANTRY_SERVER)".into())
        })?,
    };
    let http = Http::new(&server)?;
    let credential = match args.email {
        Some(email) => {
            let password = if args.password_stdin || !std::io::stdin().is_terminal() {
                read_stdin_line("password")?
            } else {
                rpassword::prompt_password(format!("Password for {email}: "))
                    .map_err(|e| CliError::Usage(format!("reading the password: {e}")))?
            };
            let reply = http
                .send(
                    routes::LOGIN.method(),
                    routes::LOGIN.template,
                    None,
                    Some(&json!({ "email": email, "password": password })),
                    &[],
                )
                .await?;
            api::session_from(email, reply)?
        }
        None => Credential::ApiKey {
            secret: read_stdin_line("API key")?,
        },
    };
    let config = Config {
        server: http.base().to_owned(),
        credential,
        org_id: None,
        org_name: None,
    };
    // Saved before its first use: that use may already refresh it.
    config::save(path, &config)?;
    let mut api = Api::signed_in(config, path.to_path_buf())?;
    let me: Me = api.typed(routes::ME, routes::ME.template).await?;
    let membership = match &org {
        Some(wanted) => me
            .memberships
            .iter()
            .find(|m| {
                m.organization.name.eq_ignore_ascii_case(wanted)
                    || m.organization.id.to_string() == *wanted
            })
            .ok_or_else(|| CliError::Usage(format!("you are not a member of {wanted:?}")))
            .map(Some)?,
        None => me.memberships.first(),
    };
    let mut config = api.config().clone();
    config.org_id = membership
        .map(|m| m.organization.id)
        .or(me.api_key.as_ref().map(|k| k.org_id));
    config.org_name = membership.map(|m| m.organization.name.clone());
    config::save(path, &config)?;
    let who = me
        .user
        .map(|u| format!("{} ({})", u.email, u.name))
        .unwrap_or_else(|| "an API key".to_owned());
    let acting = config
        .org_name
        .as_deref()
        .map(|name| format!(", acting in {name}"))
        .unwrap_or_default();
    eprintln!("Signed in to {} as {who}{acting}.", config.server);
    if me.memberships.len() > 1 && org.is_none() {
        eprintln!(
            "You belong to {} organizations: pass --org NAME to act in another.",
            me.memberships.len()
        );
    }
    Ok(())
}

pub async fn logout(path: &Path) -> CliResult<()> {
    let Some(config) = config::load(path)? else {
        eprintln!("Not signed in.");
        return Ok(());
    };
    if let Credential::Session {
        access_token,
        refresh_token,
        ..
    } = &config.credential
    {
        let http = Http::new(&config.server)?;
        let reply = http
            .send(
                routes::LOGOUT.method(),
                routes::LOGOUT.template,
                Some(access_token),
                None,
                &[(COOKIE, format!("{}={refresh_token}", api::REFRESH_COOKIE))],
            )
            .await;
        if let Err(error) = reply.and_then(api::json_of) {
            eprintln!("The server did not end the session ({error}); forgetting it here anyway.");
        }
    }
    config::remove(path)?;
    eprintln!("Signed out of {}.", config.server);
    Ok(())
}

pub async fn whoami(api: &mut Api, output: Output) -> CliResult<()> {
    let me = api.get(routes::ME, routes::ME.template).await?;
    let server = api.config().server.clone();
    output::show(output, me, |value| {
        let me: Me = read(value)?;
        let mut table = output::table(&["ORGANIZATION", "ROLE", "ID"]);
        for membership in me.memberships {
            table.add_row([
                membership.organization.name,
                membership.role,
                membership.organization.id.to_string(),
            ]);
        }
        match me.user {
            Some(user) => println!(
                "{} ({}) on {server}{}",
                user.email,
                user.name,
                if user.is_operator { ", operator" } else { "" }
            ),
            None => println!("an API key on {server}"),
        }
        Ok(table)
    })
}

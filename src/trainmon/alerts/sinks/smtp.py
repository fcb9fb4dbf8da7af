"""The e-mail sink: SMTP with plain, STARTTLS or SSL; credentials only from the environment."""

from __future__ import annotations

import os
import smtplib
import ssl
import typing
from collections.abc import Sequence
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

from trainmon.alerts.delivery import AlertSink, DeliveryError
from trainmon.alerts.formatting import (
    alert_text,
    alert_time,
    alert_title,
)
from trainmon.alerts.sinks.transport import env_value
from trainmon.config import SmtpSecurity
from trainmon.core.alert import Alert

SECURITY: tuple[str, ...] = typing.get_args(SmtpSecurity)
_DEFAULT_SMTP_PORT = {"plain": 25, "starttls": 587, "ssl": 465}


class EmailSink(AlertSink):
    """One e-mail per alert through SMTP (``smtplib``): plain, STARTTLS or implicit TLS.

    The login name and password come only from the environment variables named in the
    config, read at each delivery; they are never logged. TLS verifies the server against
    the system's CAs (or ``ca_file``) unless ``tls_verify`` is false; STARTTLS is required
    when asked for (never a silent downgrade to plain text).
    """

    kind = "email"

    def __init__(
        self,
        host: str,
        *,
        sender: str,
        to: Sequence[str],
        port: int | None = None,
        security: str = "starttls",
        username_env: str | None = None,
        password_env: str | None = None,
        tls_verify: bool = True,
        ca_file: str | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        self.host = host
        self.port = port or _DEFAULT_SMTP_PORT[security]
        self.security = security
        self.sender = sender
        self.to = list(to)
        self.username_env = username_env
        self.password_env = password_env
        self.tls_verify = tls_verify
        self.ca_file = ca_file
        self.timeout_s = timeout_s
        self.target = f"smtp {security} {host}:{self.port} to {', '.join(self.to)}"

    def secrets(self) -> Sequence[str]:
        names = (self.username_env, self.password_env)
        return [os.environ[n] for n in names if n and len(os.environ.get(n, "")) > 3]

    def _tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca_file)
        if not self.tls_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    def message(self, alert: Alert) -> EmailMessage:
        """The e-mail for ``alert`` (subject: state, rule, severity, job and rank)."""
        msg = EmailMessage()
        where = f" - {alert.job} rank {alert.rank}" if alert.job else f" - rank {alert.rank}"
        msg["Subject"] = f"trainmon {alert_title(alert)}{where}"
        msg["From"] = self.sender
        msg["To"] = ", ".join(self.to)
        msg["Date"] = formatdate(alert_time(alert), localtime=True)
        msg["Message-ID"] = make_msgid("trainmon")
        msg.set_content(alert_text(alert) + "\n")
        return msg

    def deliver(self, alert: Alert) -> None:
        username = env_value(self.username_env, "the SMTP login name")
        password = env_value(self.password_env, "the SMTP password")
        msg = self.message(alert)
        try:
            smtp: smtplib.SMTP
            if self.security == "ssl":
                smtp = smtplib.SMTP_SSL(
                    self.host, self.port, timeout=self.timeout_s, context=self._tls()
                )
            else:
                smtp = smtplib.SMTP(self.host, self.port, timeout=self.timeout_s)
            with smtp:
                if self.security == "starttls":
                    smtp.starttls(context=self._tls())
                if username is not None or password is not None:
                    smtp.login(username or "", password or "")
                smtp.send_message(msg, from_addr=self.sender, to_addrs=self.to)
        except smtplib.SMTPAuthenticationError as exc:
            raise DeliveryError(f"SMTP login refused (code {exc.smtp_code})", retry=False) from None
        except smtplib.SMTPNotSupportedError as exc:
            raise DeliveryError(f"SMTP server does not support it: {exc}", retry=False) from None
        except smtplib.SMTPRecipientsRefused as exc:
            refused = ", ".join(exc.recipients)
            raise DeliveryError(f"SMTP server refused recipients {refused}", retry=False) from None
        except ssl.SSLCertVerificationError as exc:
            raise DeliveryError(
                f"TLS certificate not trusted: {exc.verify_message}", retry=False
            ) from None
        except (smtplib.SMTPException, OSError) as exc:
            raise DeliveryError(f"SMTP {type(exc).__name__}: {exc}") from None

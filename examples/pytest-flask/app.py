"""A Flask application under test: sign-up sends a confirmation code and link
with Flask-Mail, through the SMTP server its configuration names."""

import secrets

from flask import Flask, abort, request
from flask_mail import Mail, Message

mail = Mail()


def create_app(**config):
    """The application; `config` overrides its settings (MAIL_SERVER, MAIL_PORT, ...)."""
    app = Flask(__name__)
    app.config.update(MAIL_SERVER="localhost", MAIL_PORT=25, MAIL_DEFAULT_SENDER="App <noreply@app.example.test>")
    app.config.update(config)
    mail.init_app(app)
    pending = {}

    @app.post("/signup")
    def signup():
        address = request.form["email"]
        code = str(100000 + secrets.randbelow(900000))
        pending[code] = address
        link = f"https://app.example.test/confirm?code={code}"
        message = Message("Confirm your account", recipients=[address])
        message.body = f"Your code is {code}.\nOr open {link}\n"
        message.html = f'<p>Your code is <b>{code}</b>.</p><p><a href="{link}">Confirm</a></p>'
        mail.send(message)
        return {"sent": True}, 201

    @app.get("/confirm")
    def confirm():
        address = pending.pop(request.args.get("code", ""), None)
        if address is None:
            abort(404)
        return {"confirmed": address}

    return app

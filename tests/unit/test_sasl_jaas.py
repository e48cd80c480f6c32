"""broker/security/jaas.py: Kafka's sasl.jaas.config syntax, read strictly."""

from __future__ import annotations

import pytest

from broker.security.jaas import ControlFlag, JaasConfigError, JaasEntry, parse_jaas_config, parse_jaas_entry

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"

KAFKA_EXAMPLE = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)


def test_kafkas_documented_plain_example():
    entry = parse_jaas_entry(KAFKA_EXAMPLE)
    assert entry == JaasEntry(
        PLAIN,
        ControlFlag.REQUIRED,
        {"username": "admin", "password": "admin-secret", "user_admin": "admin-secret", "user_alice": "alice-secret"},
    )


def test_multi_line_with_comments_and_single_quotes():
    entry = parse_jaas_entry(
        """
        // the broker's users
        org.apache.kafka.common.security.scram.ScramLoginModule   REQUIRED   /* any case */
            username='admin'
            password = "admin-secret" ;
        """
    )
    assert entry.login_module == "org.apache.kafka.common.security.scram.ScramLoginModule"
    assert entry.control_flag is ControlFlag.REQUIRED
    assert entry.options == {"username": "admin", "password": "admin-secret"}


@pytest.mark.parametrize(
    "quoted, value",
    [
        (r'"a\"b"', 'a"b'),
        (r"'a\'b'", "a'b"),
        (r'"back\\slash"', "back\\slash"),
        (r'"tab\there"', "tab\there"),
        (r'"nl\nx"', "nl\nx"),
        (r'"\101\60\0"', "A0\x00"),
        (r'"\477"', "\x277"),  # two octal digits only when the first is 4-7
        (r'"\q"', "q"),
        ('"semi;colon = and // not a comment"', "semi;colon = and // not a comment"),
        ('""', ""),
        ('"ünïcode ☃"', "ünïcode ☃"),
    ],
)
def test_quoted_values_and_escapes(quoted, value):
    entry = parse_jaas_entry(f"{PLAIN} required user_alice={quoted};")
    assert entry.options == {"user_alice": value}


def test_unquoted_word_values_are_taken_as_kafka_takes_them():
    entry = parse_jaas_entry(f"{PLAIN} optional unsecuredLoginStringClaim_sub=thePrincipal$x-y.z;")
    assert entry.control_flag is ControlFlag.OPTIONAL
    assert entry.options == {"unsecuredLoginStringClaim_sub": "thePrincipal$x-y.z"}


def test_several_entries_in_one_text():
    entries = parse_jaas_config(f"{PLAIN} sufficient a=\"1\"; other.Module requisite;")
    assert [(e.login_module, e.control_flag) for e in entries] == [
        (PLAIN, ControlFlag.SUFFICIENT),
        ("other.Module", ControlFlag.REQUISITE),
    ]
    assert entries[1].options == {}
    with pytest.raises(JaasConfigError, match="contains 2 login modules, should be 1 module"):
        parse_jaas_entry(f"{PLAIN} sufficient; other.Module requisite;")


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "Login module not specified"),
        ("   // only a comment\n", "Login module not specified"),
        (PLAIN, "Login module control flag not specified"),
        (f"{PLAIN} required", "not terminated by semi-colon"),
        (f'{PLAIN} required user_a="x"', "not terminated by semi-colon"),
        (f"{PLAIN} mandatory;", "Invalid login module control flag 'mandatory'"),
        (f"{PLAIN} required user_a;", "Value not specified for key 'user_a'"),
        (f"{PLAIN} required user_a=;", "Value not specified for key 'user_a'"),
        (f"{PLAIN} required user_a=", "Value not specified for key 'user_a'"),
        (f"{PLAIN} required user_a=123;", "Value not specified for key 'user_a'"),  # a number to Kafka
        (f"{PLAIN} required user_a==\"x\";", "Value not specified for key 'user_a'"),
        (f'{PLAIN} required user_a="x" user_a="y";', "appears twice"),
        (f'{PLAIN} required user_a="x', "unterminated quoted string"),
        (f'{PLAIN} required user_a="x\ny";', "unterminated quoted string"),
        (f'{PLAIN} required user_a="x\\', "unterminated quoted string"),
        (f"{PLAIN} required /* never closed;", "unterminated comment"),
        (f'{PLAIN} required user_a="x", user_b="y";', "unexpected character ','"),
        (f'{PLAIN} required {{ user_a="x" }};', "unexpected character '{'"),
        (f"{PLAIN} required / x;", "unexpected character '/'"),
        ("; x required;", "expected a login module name"),
        (f"{PLAIN} = ;", "expected a login module control flag"),
        (f'{PLAIN} required ="x";', "expected an option name"),
    ],
)
def test_malformed_configs_are_refused_with_a_message(text, message):
    with pytest.raises(JaasConfigError, match=message.replace("(", r"\(")):
        parse_jaas_config(text)


def test_values_stay_out_of_repr_and_errors():
    entry = parse_jaas_entry(KAFKA_EXAMPLE)
    assert "secret" not in repr(entry) and "user_alice" in repr(entry)
    with pytest.raises(JaasConfigError) as caught:
        parse_jaas_entry(f'{PLAIN} required user_a="hunter2" user_a="hunter3";')
    assert "hunter" not in str(caught.value)


def test_a_huge_text_is_refused_before_parsing():
    with pytest.raises(JaasConfigError, match="longer than"):
        parse_jaas_config(" " * (2 << 20))


def test_the_config_error_is_a_value_error():
    assert issubclass(JaasConfigError, ValueError)
